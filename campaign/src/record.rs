//! What a worker records, compactly: runs of consecutive IDs rather than one
//! line per ID, its holding periods, its fenced writes. One append-only
//! binary file per worker process; fixed 48-byte records, little-endian.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

/// Which generator an ID or a holding period belongs to (one pool each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `Sortable64`, default layout.
    Sortable,
    /// `Counter64`, default layout.
    Counter,
}

impl Kind {
    /// Both kinds.
    pub const ALL: [Kind; 2] = [Kind::Sortable, Kind::Counter];

    /// The pool name suffix and report label.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sortable => "sortable",
            Kind::Counter => "counter",
        }
    }

    fn code(self) -> u8 {
        match self {
            Kind::Sortable => 0,
            Kind::Counter => 1,
        }
    }

    fn from_code(c: u8) -> io::Result<Self> {
        match c {
            0 => Ok(Kind::Sortable),
            1 => Ok(Kind::Counter),
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, "unknown kind")),
        }
    }
}

/// One record of a worker's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// IDs `first..=last`, each one more than the one before, all handed out.
    Run {
        /// The generator.
        kind: Kind,
        /// The first ID.
        first: u64,
        /// The last ID.
        last: u64,
        /// A reading (BOOTTIME ns) taken before the first of them was made
        /// (0: not recorded).
        at_ns: u64,
    },
    /// A holding period of `slot`, as known at the time of writing: the gate
    /// opened at `open_ns` and is open until `until_ns` (its deadline) or
    /// was closed then (`closed`). Times are `CLOCK_BOOTTIME` nanoseconds, so
    /// they compare across the processes of one machine. Records for the
    /// same `(kind, epoch)` merge: the earliest open, the latest until.
    Hold {
        /// The pool.
        kind: Kind,
        /// The gate epoch (per worker process).
        epoch: u32,
        /// The slot.
        slot: u32,
        /// Its fence.
        fence: u64,
        /// The grant's floor (Unix ms).
        floor: u64,
        /// When the gate opened.
        open_ns: u64,
        /// Its deadline, or when it closed.
        until_ns: u64,
        /// True when `until_ns` is the close.
        closed: bool,
    },
    /// A write through the fenced-write helper of the store, on the resource
    /// of `slot`.
    Fenced {
        /// The pool.
        kind: Kind,
        /// The slot whose resource was written.
        slot: u32,
        /// The fence the write carried.
        fence: u64,
        /// Whether the store accepted it.
        accepted: bool,
        /// When (BOOTTIME ns).
        at_ns: u64,
    },
    /// A second generator on one lease was refused (the worker then used a
    /// clone of the first).
    SecondGeneratorRefused {
        /// The pool.
        kind: Kind,
    },
    /// A generator refused because this host's clock was further behind the
    /// slot's floor (what the previous holders may have issued) than
    /// `max_clock_skew`: the floor at work (DESIGN.md rule 8).
    ClockBehind {
        /// The pool.
        kind: Kind,
        /// How far behind, in ms.
        behind_ms: u64,
    },
}

const SIZE: usize = 48;

impl Record {
    fn encode(&self) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        let mut put = |at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        match *self {
            Record::Run {
                kind,
                first,
                last,
                at_ns,
            } => {
                put(8, first);
                put(16, last);
                put(24, at_ns);
                b[0] = b'R';
                b[1] = kind.code();
            }
            Record::Hold {
                kind,
                epoch,
                slot,
                fence,
                floor,
                open_ns,
                until_ns,
                closed,
            } => {
                put(8, fence);
                put(16, floor);
                put(24, open_ns);
                put(32, until_ns);
                put(40, u64::from(epoch) << 32 | u64::from(slot));
                b[0] = b'H';
                b[1] = kind.code();
                b[2] = u8::from(closed);
            }
            Record::Fenced {
                kind,
                slot,
                fence,
                accepted,
                at_ns,
            } => {
                put(8, fence);
                put(16, at_ns);
                put(24, u64::from(slot));
                b[0] = b'F';
                b[1] = kind.code();
                b[2] = u8::from(accepted);
            }
            Record::SecondGeneratorRefused { kind } => {
                b[0] = b'G';
                b[1] = kind.code();
            }
            Record::ClockBehind { kind, behind_ms } => {
                put(8, behind_ms);
                b[0] = b'B';
                b[1] = kind.code();
            }
        }
        b
    }

    fn decode(b: &[u8; SIZE]) -> io::Result<Self> {
        let get = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let kind = Kind::from_code(b[1])?;
        Ok(match b[0] {
            b'R' => Record::Run {
                kind,
                first: get(8),
                last: get(16),
                at_ns: get(24),
            },
            b'H' => Record::Hold {
                kind,
                fence: get(8),
                floor: get(16),
                open_ns: get(24),
                until_ns: get(32),
                epoch: (get(40) >> 32) as u32,
                slot: get(40) as u32,
                closed: b[2] == 1,
            },
            b'F' => Record::Fenced {
                kind,
                fence: get(8),
                at_ns: get(16),
                slot: get(24) as u32,
                accepted: b[2] == 1,
            },
            b'G' => Record::SecondGeneratorRefused { kind },
            b'B' => Record::ClockBehind {
                kind,
                behind_ms: get(8),
            },
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "unknown record")),
        })
    }
}

/// Appends records to a worker's log.
pub struct Recorder {
    out: BufWriter<File>,
}

impl Recorder {
    /// Creates (or appends to) the log at `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            out: BufWriter::with_capacity(1 << 16, file),
        })
    }

    /// Appends one record (buffered).
    pub fn push(&mut self, r: &Record) -> io::Result<()> {
        self.out.write_all(&r.encode())
    }

    /// Writes the buffer out. Records not flushed when the process is killed
    /// are lost with it: IDs never recorded were never used by anyone.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads every whole record of a log (a torn last record, from a kill in
/// mid-write, is dropped).
pub fn read(path: &Path) -> io::Result<Vec<Record>> {
    let mut bytes = Vec::new();
    BufReader::new(File::open(path)?).read_to_end(&mut bytes)?;
    bytes
        .chunks_exact(SIZE)
        .map(|c| Record::decode(c.try_into().unwrap_or(&[0; SIZE])))
        .collect()
}

/// Folds a stream of IDs into runs of consecutive values.
#[derive(Debug)]
pub struct RunBuilder {
    kind: Kind,
    run: Option<(u64, u64, u64)>,
    /// The reading stamped on runs that start from now on.
    now_ns: u64,
}

impl RunBuilder {
    /// For IDs of `kind`.
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            run: None,
            now_ns: 0,
        }
    }

    /// A reading (BOOTTIME ns) taken before the IDs pushed next were made:
    /// the time of the runs they start.
    pub fn set_time(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// Adds `id`; returns the run it ended, if any.
    #[inline]
    pub fn push(&mut self, id: u64) -> Option<Record> {
        match &mut self.run {
            Some((_, last, _)) if id == last.wrapping_add(1) => {
                *last = id;
                None
            }
            run => run
                .replace((id, id, self.now_ns))
                .map(|(first, last, at_ns)| Record::Run {
                    kind: self.kind,
                    first,
                    last,
                    at_ns,
                }),
        }
    }

    /// The run in progress, ended.
    pub fn finish(&mut self) -> Option<Record> {
        self.run.take().map(|(first, last, at_ns)| Record::Run {
            kind: self.kind,
            first,
            last,
            at_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_runs_fold() {
        let dir = std::env::temp_dir().join(format!("leasehold-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.rec");
        let records = [
            Record::Run {
                kind: Kind::Counter,
                first: 5,
                last: 9,
                at_ns: 7,
            },
            Record::Hold {
                kind: Kind::Sortable,
                epoch: 3,
                slot: 511,
                fence: 77,
                floor: 1_700_000_000_000,
                open_ns: 11,
                until_ns: 22,
                closed: true,
            },
            Record::Fenced {
                kind: Kind::Counter,
                slot: 4,
                fence: 9,
                accepted: false,
                at_ns: 33,
            },
            Record::SecondGeneratorRefused {
                kind: Kind::Sortable,
            },
            Record::ClockBehind {
                kind: Kind::Counter,
                behind_ms: 1_234,
            },
        ];
        let mut r = Recorder::create(&path).unwrap();
        for rec in &records {
            r.push(rec).unwrap();
        }
        r.flush().unwrap();
        drop(r);
        // A torn record at the end is dropped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"R\0\0")
            .unwrap();
        assert_eq!(read(&path).unwrap(), records);
        std::fs::remove_dir_all(&dir).unwrap();

        // Runs carry the reading taken before their first ID was made.
        let mut b = RunBuilder::new(Kind::Sortable);
        let mut ended = Vec::new();
        for (at, ids) in [(5, &[1, 2, 3][..]), (6, &[7, 8, 20][..])] {
            b.set_time(at);
            ended.extend(ids.iter().filter_map(|v| b.push(*v)));
        }
        let run = |first, last, at_ns| Record::Run {
            kind: Kind::Sortable,
            first,
            last,
            at_ns,
        };
        assert_eq!(ended, [run(1, 3, 5), run(7, 8, 6)]);
        assert_eq!(b.finish(), Some(run(20, 20, 6)));
    }
}
