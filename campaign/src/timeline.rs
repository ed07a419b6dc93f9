//! The picture of a run: one row per slot of each pool, time across, each
//! holding period a bar coloured by worker, faults as marked vertical lines.

use std::fmt::Write;

use crate::check::Period;
use crate::record::Kind;

/// A fault injected during the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultMark {
    /// When it started (BOOTTIME ns).
    pub at_ns: u64,
    /// When it ended (BOOTTIME ns), for faults with a duration.
    pub until_ns: Option<u64>,
    /// Its kind, short: `kill`, `stop`, `term`, `cut`, `reset`, `slow`,
    /// `freeze`, `restart`, `member m<i>`.
    pub what: String,
    /// The worker it hit, if any.
    pub worker: Option<u32>,
}

const ROW: f64 = 18.0;
const LEFT: f64 = 110.0;
const WIDTH: f64 = 1200.0;

fn color(worker: u32) -> String {
    // Well-spread hues by the golden angle.
    let hue = (f64::from(worker) * 137.508) % 360.0;
    format!("hsl({hue:.0},65%,50%)")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG timeline of `periods` and `faults` between `start_ns` and `end_ns`,
/// for pools of `pool_size` slots, titled `title`.
pub fn svg(
    title: &str,
    periods: &[Period],
    faults: &[FaultMark],
    pool_size: u32,
    start_ns: u64,
    end_ns: u64,
) -> String {
    let rows = Kind::ALL.len() as f64 * f64::from(pool_size);
    let height = 60.0 + rows * ROW + 40.0;
    let span = (end_ns.saturating_sub(start_ns)).max(1) as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(start_ns) as f64 / span) * (WIDTH - LEFT - 20.0);
    let row_y = |kind: Kind, slot: u32| {
        let k = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0) as f64;
        50.0 + (k * f64::from(pool_size) + f64::from(slot)) * ROW
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="14">{}</text>"#,
        escape(title)
    );
    for kind in Kind::ALL {
        for slot in 0..pool_size {
            let y = row_y(kind, slot);
            let _ = writeln!(
                s,
                r##"<text x="10" y="{:.1}">{} slot {slot}</text><line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#eee"/>"##,
                y + 12.0,
                kind.name(),
                WIDTH - 20.0,
                y + ROW / 2.0,
                y + ROW / 2.0
            );
        }
    }
    for p in periods {
        let (x0, x1) = (x(p.open_ns), x(p.end_ns.max(p.open_ns)));
        let y = row_y(p.kind, p.slot);
        let dash = if p.closed {
            ""
        } else {
            r#" stroke-dasharray="3,2""#
        };
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" stroke="black" stroke-width="0.5"{dash}><title>worker {} fence {} {:.3}s..{:.3}s{}</title></rect>"#,
            y + 2.0,
            (x1 - x0).max(1.0),
            ROW - 4.0,
            color(p.worker),
            p.worker,
            p.fence,
            p.open_ns.saturating_sub(start_ns) as f64 / 1e9,
            p.end_ns.saturating_sub(start_ns) as f64 / 1e9,
            if p.closed {
                ""
            } else {
                " (deadline; killed or cut)"
            }
        );
    }
    let bottom = 50.0 + rows * ROW;
    for f in faults {
        let x0 = x(f.at_ns);
        let label = match f.worker {
            Some(w) => format!("{} w{w}", f.what),
            None => f.what.clone(),
        };
        if let Some(until) = f.until_ns {
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.1}" y="40" width="{:.1}" height="{:.1}" fill="red" opacity="0.08"/>"#,
                (x(until) - x0).max(1.0),
                bottom - 40.0
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{x0:.1}" x2="{x0:.1}" y1="40" y2="{bottom:.1}" stroke="red" stroke-width="0.8"/><text x="{x0:.1}" y="{:.1}" fill="red" font-size="9" transform="rotate(45 {x0:.1} {:.1})">{}</text>"#,
            bottom + 12.0,
            bottom + 12.0,
            escape(&label)
        );
    }
    let secs = span / 1e9;
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{:.1}">0 s</text><text x="{:.1}" y="{:.1}" text-anchor="end">{secs:.1} s</text></svg>"#,
        height - 8.0,
        WIDTH - 20.0,
        height - 8.0
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_period_and_fault() {
        let p = Period {
            worker: 3,
            kind: Kind::Counter,
            slot: 1,
            fence: 9,
            floor: 0,
            open_ns: 1_000_000_000,
            end_ns: 2_000_000_000,
            closed: false,
        };
        let f = FaultMark {
            at_ns: 1_500_000_000,
            until_ns: Some(1_700_000_000),
            what: "stop".into(),
            worker: Some(3),
        };
        let out = svg("t <1>", &[p], &[f], 2, 0, 3_000_000_000);
        assert!(out.starts_with("<svg") && out.trim_end().ends_with("</svg>"));
        assert!(out.contains("worker 3 fence 9") && out.contains("stop w3"));
        assert!(out.contains("t &lt;1&gt;"));
    }
}
