//! A simulator finding drawn as a timeline: `cargo xtask sim` reads the
//! timeline the simulator wrote for the finding's shrunk scenario
//! (`leasehold-sim --timeline FILE`, its format in `sim/src/timeline.rs`)
//! and draws it with the guide's picture code (`crate::svg`).
//!
//! One lane per process (the windows in which it may generate, coloured by
//! slot; its pauses, partitions, ends and wall-clock steps), one for the
//! store's own faults when it has any, one per slot (whom the store holds
//! it for, and until when), time across; the finding's instant in
//! vermilion across every lane, with a note saying what broke. A finding
//! much shorter than the run (a window that overlaps another by half a
//! millisecond in a run of half a minute) gets a second panel: the lanes
//! of the parties and their slot around that instant, on an axis of its
//! own. Labels that would overlap another or leave the picture are left
//! off, and a test checks the picture has none.

use std::path::{Path, PathBuf};

use crate::svg::{
    Anchor, BLUE, GREEN, GREY, INK, LIGHT, ORANGE, SKY, Svg, TimeAxis, VERMILION, seconds,
    text_width,
};

const WIDTH: f64 = 900.0;
const X0: f64 = 110.0;
const X1: f64 = 860.0;
const LANE: f64 = 58.0;
const LABEL: f64 = 12.0;

/// The slots' colours (the simulator draws up to three slots).
const SLOT_COLOURS: [&str; 4] = [BLUE, ORANGE, GREEN, SKY];

fn slot_colour(slot: usize) -> &'static str {
    SLOT_COLOURS[slot % SLOT_COLOURS.len()]
}

/// A span of one process or slot: (lane's index, slot, fence, from, to),
/// times in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    who: usize,
    slot: usize,
    fence: u64,
    from: f64,
    to: f64,
}

/// A fault, on a process's lane (`Some`) or the store's (`None`).
#[derive(Clone, Debug, PartialEq)]
struct Fault {
    proc: Option<usize>,
    from: f64,
    /// Where a fault lasts a while (a pause, a partition, a store down).
    to: Option<f64>,
    label: String,
    /// Drawn hatched (nothing of it runs) rather than as a dashed line.
    hatched: bool,
}

/// The finding: a violation or an outage.
#[derive(Clone, Debug, PartialEq)]
struct Finding {
    kind: String,
    at: f64,
    parties: Vec<usize>,
    what: String,
}

/// A timeline as the simulator wrote it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Timeline {
    seed: u64,
    plants: String,
    kubernetes: bool,
    length: f64,
    ttl: f64,
    processes: usize,
    slots: usize,
    starts: Vec<(usize, f64)>,
    windows: Vec<Span>,
    holds: Vec<Span>,
    faults: Vec<Fault>,
    finding: Option<Finding>,
}

fn ns(s: &str) -> Result<f64, String> {
    s.parse::<u64>()
        .map(|n| n as f64 / 1e9)
        .map_err(|e| format!("{s:?}: {e}"))
}

fn int<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.parse::<T>().map_err(|e| format!("{s:?}: {e}"))
}

/// A signed number of nanoseconds as a short label: `+1.2 s`, `−300 ms`.
fn signed(by: i64) -> String {
    let sign = if by < 0 { "−" } else { "+" };
    format!("{sign}{}", short(by.unsigned_abs() as f64 / 1e9))
}

/// A duration in seconds as a short label, in the unit that suits it.
fn short(s: f64) -> String {
    // A sum of float steps lands a hair below a round value.
    if s >= 1.0 - 1e-9 {
        seconds(s)
    } else if s >= 1e-3 - 1e-12 {
        format!("{} ms", trim(s * 1e3))
    } else {
        format!("{} µs", trim(s * 1e6))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

impl Timeline {
    /// Reads the simulator's timeline text; kinds it does not know are
    /// skipped.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        if lines.next() != Some("leasehold-sim timeline 1") {
            return Err("not a leasehold-sim timeline (version 1)".into());
        }
        let mut t = Timeline::default();
        for (i, line) in lines.enumerate() {
            let f: Vec<&str> = line.split(' ').collect();
            let bad = |e: String| format!("line {}: {line:?}: {e}", i + 2);
            let need = |n: usize| {
                if f.len() < n {
                    Err(bad(format!("{n} fields expected")))
                } else {
                    Ok(())
                }
            };
            let proc_fault = |label: String, hatched: bool| -> Result<Fault, String> {
                Ok(Fault {
                    proc: Some(int(f[1])?),
                    from: ns(f[2])?,
                    to: Some(ns(f[3])?),
                    label,
                    hatched,
                })
            };
            match f[0] {
                "seed" => {
                    need(2)?;
                    t.seed = int(f[1]).map_err(bad)?;
                }
                "plants" => {
                    need(2)?;
                    t.plants = f[1].replace(',', " + ");
                }
                "store" => {
                    need(2)?;
                    t.kubernetes = f[1] == "kubernetes";
                }
                "length" => {
                    need(2)?;
                    t.length = ns(f[1]).map_err(bad)?;
                }
                "ttl" => {
                    need(2)?;
                    t.ttl = ns(f[1]).map_err(bad)?;
                }
                "processes" => {
                    need(2)?;
                    t.processes = int(f[1]).map_err(bad)?;
                }
                "slots" => {
                    need(2)?;
                    t.slots = int(f[1]).map_err(bad)?;
                }
                "start" => {
                    need(3)?;
                    t.starts
                        .push((int(f[1]).map_err(bad)?, ns(f[2]).map_err(bad)?));
                }
                "window" | "hold" => {
                    need(6)?;
                    let (a, b): (usize, usize) = (int(f[1]).map_err(bad)?, int(f[2]).map_err(bad)?);
                    let (who, slot) = if f[0] == "window" { (a, b) } else { (b, a) };
                    let span = Span {
                        who,
                        slot,
                        fence: int(f[3]).map_err(bad)?,
                        from: ns(f[4]).map_err(bad)?,
                        to: ns(f[5]).map_err(bad)?,
                    };
                    if f[0] == "window" {
                        t.windows.push(span);
                    } else {
                        t.holds.push(span);
                    }
                }
                "pause" => {
                    need(4)?;
                    t.faults
                        .push(proc_fault("paused".into(), true).map_err(bad)?);
                }
                "cut" => {
                    need(4)?;
                    t.faults
                        .push(proc_fault("cut off".into(), false).map_err(bad)?);
                }
                "kill" | "shutdown" => {
                    need(4)?;
                    let p = int(f[1]).map_err(bad)?;
                    let at = ns(f[2]).map_err(bad)?;
                    let down = ns(f[3]).map_err(bad)?;
                    let what = if f[0] == "kill" {
                        "killed"
                    } else {
                        "shuts down"
                    };
                    t.faults.push(Fault {
                        proc: Some(p),
                        from: at,
                        to: Some(at + down),
                        label: format!("{what}, restarts"),
                        hatched: false,
                    });
                }
                "wall-step" => {
                    need(4)?;
                    t.faults.push(Fault {
                        proc: Some(int(f[1]).map_err(bad)?),
                        from: ns(f[2]).map_err(bad)?,
                        to: None,
                        label: format!("wall {}", signed(int(f[3]).map_err(bad)?)),
                        hatched: false,
                    });
                }
                "store-step" => {
                    need(3)?;
                    t.faults.push(Fault {
                        proc: None,
                        from: ns(f[1]).map_err(bad)?,
                        to: None,
                        label: format!("clock {}", signed(int(f[2]).map_err(bad)?)),
                        hatched: false,
                    });
                }
                "store-crash" | "failover" => {
                    need(4)?;
                    let at = ns(f[1]).map_err(bad)?;
                    let down = ns(f[2]).map_err(bad)?;
                    let lose = ns(f[3]).map_err(bad)?;
                    let label = match (f[0], lose > 0.0) {
                        ("store-crash", true) => format!("crash, forgets {}", short(lose)),
                        ("store-crash", false) => "crash".to_string(),
                        (_, true) => format!("failover, lacks {}", short(lose)),
                        _ => "failover".to_string(),
                    };
                    t.faults.push(Fault {
                        proc: None,
                        from: at,
                        to: Some(at + down),
                        label,
                        hatched: true,
                    });
                }
                "wipe" => {
                    need(2)?;
                    t.faults.push(Fault {
                        proc: None,
                        from: ns(f[1]).map_err(bad)?,
                        to: None,
                        label: "wipe".into(),
                        hatched: false,
                    });
                }
                "violation" | "outage" => {
                    need(4)?;
                    let parties = if f[2] == "-" {
                        Vec::new()
                    } else {
                        f[2].split(',')
                            .map(|p| int(p.trim_start_matches('p')))
                            .collect::<Result<_, _>>()
                            .map_err(bad)?
                    };
                    // A violation comes first, as the simulator reports it.
                    if t.finding.as_ref().is_none_or(|f| f.kind != "violation") {
                        t.finding = Some(Finding {
                            kind: f[0].to_string(),
                            at: ns(f[1]).map_err(bad)?,
                            parties,
                            what: f[3..].join(" "),
                        });
                    }
                }
                _ => {}
            }
        }
        if t.length <= 0.0 || t.processes == 0 || t.slots == 0 {
            return Err("the timeline has no length, processes or slots".into());
        }
        if let Some(bad) = t
            .windows
            .iter()
            .find(|w| w.who >= t.processes || w.slot >= t.slots)
            .or(t
                .holds
                .iter()
                .find(|h| h.who >= t.processes || h.slot >= t.slots))
        {
            return Err(format!(
                "a span names a process or slot beyond the pool: {bad:?}"
            ));
        }
        Ok(t)
    }
}

/// Places labels where they overlap nothing placed before (the lanes'
/// names, the axes, other labels) and stay inside the picture; one that
/// finds no place is left off.
struct Placer {
    taken: Vec<(f64, f64, f64, f64)>,
    left_off: usize,
}

impl Placer {
    fn free(&self, b: (f64, f64, f64, f64)) -> bool {
        b.0 >= 0.0
            && b.2 <= WIDTH
            && self
                .taken
                .iter()
                .all(|t| !(b.0 < t.2 && t.0 < b.2 && b.1 < t.3 && t.1 < b.3))
    }

    /// Notes a box drawn elsewhere.
    fn take(&mut self, x: f64, y: f64, s: &str, size: f64, anchor: Anchor) {
        let w = text_width(s, size, false);
        let x0 = match anchor {
            Anchor::Start => x,
            Anchor::Middle => x - w / 2.0,
            Anchor::End => x - w,
        };
        self.taken
            .push((x0, y - size * 0.8, x0 + w, y + size * 0.2));
    }

    /// Draws `s` at `x` on the first of `rows` (baselines) where it fits,
    /// starting at `x` or, if that runs past the axis, ending there.
    fn place(&mut self, svg: &mut Svg, x: f64, rows: &[f64], s: &str, colour: &str) -> bool {
        let w = text_width(s, LABEL, false);
        for &y in rows {
            for (x0, anchor) in [(x + 3.0, Anchor::Start), (x - 3.0 - w, Anchor::End)] {
                let b = (x0, y - LABEL * 0.8, x0 + w, y + LABEL * 0.2);
                if x0 >= X0 - 4.0 && x0 + w <= WIDTH - 8.0 && self.free(b) {
                    let at = if anchor == Anchor::Start { x0 } else { x0 + w };
                    svg.text(at, y, s, anchor, LABEL, colour, false);
                    self.taken.push(b);
                    return true;
                }
            }
        }
        self.left_off += 1;
        false
    }
}

/// Lines of at most `width` pixels at `size`, broken at spaces.
fn wrap(s: &str, width: f64, size: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let longer = if line.is_empty() {
            word.to_string()
        } else {
            format!("{line} {word}")
        };
        if text_width(&longer, size, false) > width && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
            line = word.to_string();
        } else {
            line = longer;
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// What one panel shows: which lanes, over which span of time.
struct Panel {
    procs: Vec<usize>,
    slots: Vec<usize>,
    store: bool,
    axis: TimeAxis,
    /// Ticks labelled relative to the finding's instant (the zoomed
    /// panel), or in seconds from the run's start.
    relative_to: Option<f64>,
    /// Seconds between ticks.
    step: f64,
}

/// Draws `t`; `top` is where its first lane goes.
fn draw_panel(svg: &mut Svg, placer: &mut Placer, t: &Timeline, panel: &Panel, top: f64) -> f64 {
    let axis = panel.axis;
    let (lo, hi) = (axis.t0, axis.t1);
    // Where a span from `a` to `b` is drawn, cut to the panel; `None` when
    // none of it falls inside.
    let span =
        |a: f64, b: f64| (b >= lo && a <= hi).then(|| (axis.x(a.max(lo)), axis.x(b.min(hi))));
    // The height of `key`'s lane among `lanes`.
    let lane =
        |lanes: &[(usize, f64)], key: usize| lanes.iter().find(|(k, _)| *k == key).map(|&(_, y)| y);
    let mut y = top;
    let mut lanes: Vec<(f64, String)> = Vec::new();
    let proc_y: Vec<(usize, f64)> = panel
        .procs
        .iter()
        .map(|&p| {
            let at = y;
            lanes.push((at, format!("p{p}")));
            y += LANE;
            (p, at)
        })
        .collect();
    let store_y = panel.store.then(|| {
        let at = y;
        lanes.push((at, "store".into()));
        y += LANE;
        at
    });
    let slot_y: Vec<(usize, f64)> = panel
        .slots
        .iter()
        .map(|&s| {
            let at = y;
            lanes.push((at, format!("slot {s}")));
            y += LANE;
            (s, at)
        })
        .collect();
    let names: Vec<(f64, &str)> = lanes.iter().map(|(y, n)| (*y, n.as_str())).collect();
    axis.lanes(svg, &names);
    for (y, n) in &lanes {
        placer.take(20.0, y + 5.0, n, 14.0, Anchor::Start);
    }
    let rows = |y: f64| [y - 13.0, y + 24.0];
    // The finding's line crosses every lane: labels keep clear of it.
    let bottom = y - LANE + 14.0;
    if let Some(f) = &t.finding
        && f.at >= lo
        && f.at <= hi
    {
        let x = axis.x(f.at);
        placer.taken.push((x - 2.0, top - 24.0, x + 2.0, bottom));
    }

    // The faults first, so the bars are drawn over their backgrounds.
    for f in &t.faults {
        let y = match f.proc {
            Some(p) => lane(&proc_y, p),
            None => store_y,
        };
        let Some(y) = y else { continue };
        let to = f.to.unwrap_or(f.from);
        let Some((xa, xb)) = span(f.from, to) else {
            continue;
        };
        match f.to {
            Some(_) if f.hatched => svg.hatch(xa, y - 10.0, (xb - xa).max(1.0), 20.0, GREY),
            Some(_) if f.label.starts_with("cut") => {
                svg.line(
                    (xa, y + 11.0),
                    (xb.max(xa + 1.0), y + 11.0),
                    GREY,
                    2.0,
                    Some("4 3"),
                );
            }
            Some(_) => {
                // An end: a cross where it ends, a dot where it is back.
                if f.from >= lo {
                    svg.cross((xa, y), 5.0, INK);
                }
                if to <= hi {
                    svg.dot((xb, y), 4.0, INK);
                }
                svg.line((xa, y), (xb, y), INK, 1.0, Some("2 3"));
            }
            None => svg.line((xa, y - 12.0), (xa, y + 12.0), INK, 2.0, None),
        }
        placer.place(svg, xa, &rows(y), &f.label, INK);
    }
    for &(p, at) in &t.starts {
        if let Some(y) = lane(&proc_y, p)
            && at > lo
            && at < hi
        {
            svg.line(
                (axis.x(at), y - 9.0),
                (axis.x(at), y + 9.0),
                GREY,
                1.5,
                None,
            );
            placer.place(svg, axis.x(at), &rows(y), "starts", GREY);
        }
    }

    // What each process may generate, coloured by slot.
    for w in &t.windows {
        let (Some(y), Some((xa, xb))) = (lane(&proc_y, w.who), span(w.from, w.to)) else {
            continue;
        };
        svg.rect(
            xa,
            y - 7.0,
            (xb - xa).max(1.5),
            14.0,
            slot_colour(w.slot),
            None,
        );
    }
    // Whom the store holds each slot for: the holder named at its start.
    for h in &t.holds {
        let (Some(y), Some((xa, xb))) = (lane(&slot_y, h.slot), span(h.from, h.to)) else {
            continue;
        };
        svg.rect(
            xa,
            y - 6.0,
            (xb - xa).max(1.5),
            12.0,
            slot_colour(h.slot),
            Some(INK),
        );
        let label = if h.from >= lo {
            format!("p{}, fence {}", h.who, h.fence)
        } else {
            format!("p{}", h.who)
        };
        if !placer.place(svg, xa, &rows(y), &label, INK) {
            placer.left_off -= 1;
            placer.place(svg, xa, &rows(y), &format!("p{}", h.who), INK);
        }
    }

    // The finding's instant, across every lane of the panel.
    if let Some(f) = &t.finding
        && f.at >= lo
        && f.at <= hi
    {
        let x = axis.x(f.at);
        svg.line((x, top - 24.0), (x, bottom), VERMILION, 2.0, None);
        for &p in &f.parties {
            if let Some(y) = lane(&proc_y, p) {
                svg.dot((x, y), 4.5, VERMILION);
            }
        }
    }

    // The shrinker ends a run just after its finding: where the zoomed
    // panel reaches past the end, the bars stop there for that reason.
    if t.length < hi
        && let Some(&(_, first)) = proc_y.first()
    {
        let x = axis.x(t.length);
        svg.line((x, first - 24.0), (x, bottom), GREY, 1.5, Some("5 3"));
        placer.place(svg, x, &[first - 13.0, first + 24.0], "the run ends", GREY);
    }
    let axis_y = bottom + 10.0;
    let step = panel.step;
    let label = |v: f64| match panel.relative_to {
        None => seconds(v),
        Some(at) if (v - at).abs() < step * 1e-3 => "0".to_string(),
        Some(at) => {
            let d = ((v - at) * 1e9).round() as i64;
            signed(d)
        }
    };
    axis.draw(svg, axis_y, step, label, INK);
    let mut i = 0u32;
    loop {
        let v = axis.t0 + f64::from(i) * step;
        if v > axis.t1 + 1e-12 {
            break;
        }
        let text = label(v);
        placer.take(axis.x(v), axis_y + 19.0, &text, 13.0, Anchor::Middle);
        i += 1;
    }
    axis_y + 30.0
}

/// A tick spacing of 1, 2 or 5 times a power of ten that gives at most
/// eight ticks over `span` seconds (the guide's axis starts at half a
/// second, too coarse for a finding's neighbourhood).
fn fine_step(span: f64) -> f64 {
    let mut step = 1e-9;
    loop {
        for k in [1.0, 2.0, 5.0] {
            if span / (step * k) <= 8.0 {
                return step * k;
            }
        }
        step *= 10.0;
    }
}

/// The picture of `t`, sized to what it holds.
pub(crate) fn draw(t: &Timeline) -> Svg {
    // Drawn once to learn its height, then at that height.
    let (_, height) = draw_at(t, 10_000.0);
    draw_at(t, height).0
}

/// The picture of `t`, `height` pixels high, and the height it needs.
fn draw_at(t: &Timeline, height: f64) -> (Svg, f64) {
    let procs: Vec<usize> = (0..t.processes).collect();
    let slots: Vec<usize> = (0..t.slots).collect();
    let store = t.faults.iter().any(|f| f.proc.is_none());
    let axis = TimeAxis {
        x0: X0,
        x1: X1,
        t0: 0.0,
        t1: t.length,
    };
    let whole = Panel {
        procs,
        slots,
        store,
        axis,
        relative_to: None,
        step: axis.step(),
    };
    let zoom = t.finding.as_ref().and_then(|f| zoom(t, f));
    let finding_lines: Vec<String> = t.finding.as_ref().map_or_else(Vec::new, |f| {
        let kind = f.kind.to_uppercase();
        wrap(
            &format!("{kind} at {}: {}", exact(f.at), f.what),
            // Its first line is bold, and wider.
            (X1 - 20.0) / 1.08,
            13.0,
        )
    });
    let notes = [
        format!(
            "{} processes, {} slot{}, TTL {}, {}. Bars on a process's lane: it may generate,",
            t.processes,
            t.slots,
            if t.slots == 1 { "" } else { "s" },
            seconds(t.ttl),
            if t.kubernetes {
                "Kubernetes Leases"
            } else {
                "a store that expires leases"
            },
        ),
        "by slot; on a slot's lane: whom the store holds it for. Grey hatching: paused, or the \
         store down;"
            .to_string(),
        "dashed grey: cut off from the store; a cross and a dot: ended, and back as a new process."
            .to_string(),
    ];
    let notes: Vec<String> = notes
        .iter()
        .flat_map(|n| wrap(n, X1 - 20.0, 13.0))
        .collect();
    let mut svg = Svg::new(WIDTH, height);
    let plants = if t.plants.is_empty() || t.plants == "none" {
        "nothing planted".to_string()
    } else {
        format!("planted: {}", t.plants)
    };
    let title = format!("leasehold-sim finding, seed {} ({plants}), shrunk", t.seed);
    let mut legend: Vec<(&str, String)> = (0..t.slots)
        .map(|s| (slot_colour(s), format!("slot {s}")))
        .collect();
    legend.push((GREY, "paused, down".into()));
    if let Some(f) = &t.finding {
        legend.push((VERMILION, f.kind.clone()));
    }
    let legend: Vec<(&str, &str)> = legend.iter().map(|(c, s)| (*c, s.as_str())).collect();
    svg.heading(&title, &legend);
    let mut placer = Placer {
        taken: vec![(0.0, 0.0, WIDTH, 56.0)],
        left_off: 0,
    };
    let mut y = draw_panel(&mut svg, &mut placer, t, &whole, 110.0);
    if let Some(z) = &zoom {
        y += 20.0;
        let what = format!(
            "Around the {}: {} either side of {}",
            t.finding.as_ref().map_or("finding", |f| f.kind.as_str()),
            short((z.axis.t1 - z.axis.t0) / 2.0),
            exact(z.relative_to.unwrap_or(0.0))
        );
        svg.text(20.0, y, &what, Anchor::Start, 14.0, INK, true);
        svg.line((X0, y + 8.0), (X1, y + 8.0), LIGHT, 1.0, None);
        placer.take(20.0, y, &what, 14.0 * 1.08, Anchor::Start);
        y = draw_panel(&mut svg, &mut placer, t, z, y + 50.0);
    }
    y += 16.0;
    svg.notes_in(y, &finding_lines, VERMILION, true);
    y += 20.0 * finding_lines.len() as f64;
    let mut notes = notes;
    if placer.left_off > 0 {
        notes.push(format!(
            "{} label{} left off where {} would have covered another.",
            placer.left_off,
            if placer.left_off == 1 { "" } else { "s" },
            if placer.left_off == 1 { "it" } else { "they" },
        ));
    }
    svg.notes(y, &notes);
    let needed = y + 20.0 * notes.len() as f64;
    (svg, needed)
}

/// A true instant with the digits a finding needs: `31.922748 s`.
fn exact(t: f64) -> String {
    format!("{t:.6} s")
}

/// The second panel, when the finding is too short to see across the
/// whole run: the parties' lanes and the slot their windows share, over
/// a few times the finding's own span around its instant.
fn zoom(t: &Timeline, f: &Finding) -> Option<Panel> {
    // How long the finding lasts: from its instant to the end of the
    // earliest-ending window of a party that runs across it.
    let across: Vec<&Span> = t
        .windows
        .iter()
        .filter(|w| f.parties.contains(&w.who) && w.from <= f.at && w.to > f.at)
        .collect();
    let lasts = across
        .iter()
        .map(|w| w.to - f.at)
        .fold(f64::INFINITY, f64::min);
    let lasts = if lasts.is_finite() {
        lasts
    } else {
        t.ttl / 20.0
    };
    let half = (lasts * 3.0).max(1e-6);
    if half * 2.0 > t.length / 20.0 {
        return None;
    }
    let mut procs = f.parties.clone();
    procs.sort_unstable();
    procs.dedup();
    let mut slots: Vec<usize> = across.iter().map(|w| w.slot).collect();
    slots.sort_unstable();
    slots.dedup();
    // Round ticks, one of them at the finding's instant: each side a
    // whole number of steps.
    let step = fine_step(half * 2.0);
    let half = (half / step).ceil() * step;
    Some(Panel {
        procs,
        slots,
        store: false,
        axis: TimeAxis {
            x0: X0,
            x1: X1,
            t0: f.at - half,
            t1: f.at + half,
        },
        relative_to: Some(f.at),
        step,
    })
}

/// Draws a timeline's text; refuses a picture whose labels overlap or
/// leave it.
pub(crate) fn render(text: &str) -> Result<String, String> {
    let svg = draw(&Timeline::parse(text)?);
    let overlaps = svg.overlapping_labels();
    let clipped = svg.clipped_labels();
    if !overlaps.is_empty() || !clipped.is_empty() {
        return Err(format!(
            "labels overlap {overlaps:?} or leave the picture {clipped:?}"
        ));
    }
    Ok(svg.finish())
}

/// Draws the timeline in `from` as `dir/finding-<plants>-<seed>.svg`
/// (`finding-<seed>.svg` with nothing planted), so that findings of two
/// plants at one seed keep a picture each; returns its path.
pub(crate) fn write(from: &Path, dir: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(from)
        .map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    let timeline = Timeline::parse(&text)?;
    let svg = render(&text)?;
    let name = match timeline.plants.as_str() {
        "" | "none" => format!("finding-{}.svg", timeline.seed),
        plants => format!(
            "finding-{}-{}.svg",
            plants.replace(" + ", "+"),
            timeline.seed
        ),
    };
    let path = dir.join(name);
    std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pictures::tests::balanced;

    /// A finding as the simulator writes it, by hand: three processes on
    /// two slots, every kind of fault, and a violation half a millisecond
    /// long in a run of 20 s (so the picture needs its second panel).
    const FIXTURE: &str = "leasehold-sim timeline 1
seed 4242
plants gate-ignores-deadline,no-floor
store expiring
length 20000000000
ttl 2000000000
processes 3
slots 2
start 0 100000000
start 1 300000000
start 2 5000000000
window 0 0 1000100 110000000 9000000000
window 0 0 1000100 15000000000 15000500000
window 1 1 1000300 310000000 4000000000
window 1 0 1009500 9600000000 15000300000
window 2 1 1005100 5100000000 19000000000
hold 0 0 1000100 100000000 10000000000
hold 0 1 1009500 9500000000 20000000000
hold 1 1 1000300 300000000 4500000000
hold 1 2 1005100 5000000000 20000000000
pause 0 9000000000 15000000000
cut 1 2000000000 3500000000
cut 2 12000000000 14000000000
kill 1 4000000000 1000000000
shutdown 2 19000000000 500000000
wall-step 2 7000000000 -1500000000
wall-step 2 7000100000 900000000
wall-step 2 7000200000 900000000
wall-step 2 7000300000 900000000
wall-step 2 7000400000 900000000
store-step 11000000000 300000000
store-crash 3000000000 800000000 1000000000
wipe 16000000000
failover 17000000000 400000000 0
some-later-kind 1 2 3
violation 15000000000 p1,p0 slot 0: p1 (fence 1009500, window 9.600000000.. 15.000300000) and p0 (fence 1000100, window 15.000000000.. 15.000500000) may both generate for 300000 ns
outage 18000000000 p2 p2 kept from generating
";

    #[test]
    fn a_finding_is_drawn_well_formed_with_no_label_overlapping_or_clipped() {
        let svg = draw(&Timeline::parse(FIXTURE).unwrap());
        if let Ok(to) = std::env::var("SIM_PICTURE_FIXTURE_SVG") {
            std::fs::write(to, svg.finish()).unwrap();
        }
        assert!(svg.width() <= 900.0);
        assert_eq!(svg.overlapping_labels(), Vec::<(String, String)>::new());
        assert_eq!(svg.clipped_labels(), Vec::<String>::new());
        let text = render(FIXTURE).unwrap();
        assert!(text.starts_with("<svg "), "{text}");
        balanced(&text).unwrap();
        for words in [
            "seed 4242",
            "gate-ignores-deadline + no-floor",
            "VIOLATION at 15.000000 s: slot 0: p1",
            "Around the violation",
            "slot 1",
            "paused",
            "cut off",
            "killed, restarts",
            "shuts down, restarts",
            "wall −1.5 s",
            "clock +300 ms",
            "crash, forgets 1 s",
            "wipe",
            "failover",
            "p1, fence 1009500",
            "store",
        ] {
            assert!(text.contains(words), "the picture does not say {words:?}");
        }
        // The five wall-clock steps 0.1 ms apart cannot all be labelled:
        // what is left off is said.
        assert!(text.contains("left off where"), "{text}");
        // A violation comes first; the outage is not the finding drawn.
        assert!(!text.contains("OUTAGE"), "{text}");
    }

    #[test]
    fn the_same_timeline_is_the_same_picture() {
        assert_eq!(render(FIXTURE).unwrap(), render(FIXTURE).unwrap());
    }

    /// A finding as long as the run needs no second panel; an outage is
    /// named as one; a long finding's note (its first line bold) is
    /// wrapped inside the picture.
    #[test]
    fn a_long_finding_is_drawn_in_one_panel() {
        let text = "leasehold-sim timeline 1\nseed 1\nplants none\nstore kubernetes\n\
                    length 4000000000\nttl 1000000000\nprocesses 2\nslots 1\n\
                    window 0 0 7 0 3000000000\n\
                    outage 1000000000 p1 p1 lost its lease (the local deadline passed \
                    without a confirmed renewal (last attempt: renewal did not come back in \
                    time)), although nothing faulted it from one TTL before it last confirmed \
                    the lease\n";
        let svg = render(text).unwrap();
        assert!(svg.contains("OUTAGE at 1.000000 s"), "{svg}");
        assert!(svg.contains("nothing planted"), "{svg}");
        assert!(svg.contains("Kubernetes Leases"), "{svg}");
        assert!(!svg.contains("Around the"), "{svg}");
    }

    /// A shrunk run ends a millisecond after its finding: the zoomed
    /// panel says so where its bars stop.
    #[test]
    fn the_zoomed_panel_marks_where_a_shrunk_run_ends() {
        let text = "leasehold-sim timeline 1\nseed 9\nplants no-margin\nstore expiring\n\
                    length 20000500000\nttl 1000000000\nprocesses 2\nslots 1\n\
                    window 0 0 7 0 20000200000\nwindow 1 0 8 19999900000 20000500000\n\
                    hold 0 1 8 19999800000 20000500000\n\
                    violation 19999900000 p1,p0 slot 0: p0 and p1 may both generate\n";
        let svg = draw(&Timeline::parse(text).unwrap());
        assert_eq!(svg.overlapping_labels(), Vec::<(String, String)>::new());
        assert_eq!(svg.clipped_labels(), Vec::<String>::new());
        let svg = svg.finish();
        assert!(svg.contains("Around the violation"), "{svg}");
        assert!(svg.contains("the run ends"), "{svg}");
    }

    #[test]
    fn what_is_not_a_timeline_is_refused() {
        assert!(render("<svg/>").is_err());
        let beyond = "leasehold-sim timeline 1\nlength 10\nprocesses 1\nslots 1\n\
                      window 3 0 1 0 5\n";
        assert!(render(beyond).is_err());
        assert!(render("leasehold-sim timeline 1\nlength x\n").is_err());
    }

    #[test]
    fn a_zoomed_axis_has_round_ticks() {
        let close = |a: f64, b: f64| (a - b).abs() < b * 1e-9;
        assert!(close(fine_step(4e-3), 0.5e-3), "{}", fine_step(4e-3));
        assert!(close(fine_step(30e-6), 5e-6), "{}", fine_step(30e-6));
        assert!(close(fine_step(20.0), 5.0), "{}", fine_step(20.0));
        assert_eq!(signed(-1_500_000_000), "−1.5 s");
        assert_eq!(signed(300_000), "+300 µs");
        assert_eq!(short(0.000_999_999_999_99), "1 ms");
    }
}
