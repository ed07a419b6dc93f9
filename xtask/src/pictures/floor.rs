//! `floor-handover.svg`: a slot handed over between two hosts whose clocks
//! disagree. A releases and reports the last timestamp it issued; the store
//! keeps it as the slot's floor; B, whose clock is behind, waits until its
//! clock passes the floor before it issues anything, so its IDs never repeat
//! A's (DESIGN.md rule 8).

use std::time::Duration;

use super::Params;
use super::sim::{self, Event, Holder, Outcome, Store, secs};
use crate::svg::{Anchor, BLUE, GREY, INK, LIGHT, ORANGE, Svg, TimeAxis, VERMILION};

/// How far B's clock is behind A's.
const B_BEHIND: Duration = Duration::from_secs(1);

/// A's wall clock at the run's origin: 2026-01-01 12:00:00 UTC.
const A_CLOCK_AT_ORIGIN_MS: i64 = 1_767_268_800_000;

/// `hh:mm:ss.mmm` of a Unix time in milliseconds (UTC).
fn clock(ms: u64, millis: bool) -> String {
    let day = ms % 86_400_000;
    let (h, m, s, f) = (
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000,
    );
    if millis {
        format!("{h:02}:{m:02}:{s:02}.{f:03}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

pub(super) fn draw(p: &Params) -> Result<Svg, String> {
    let config = p.config()?;
    let timing = config.timing().clone();
    let (clk, origin) = sim::clock();
    let origin_ms = i64::try_from(origin.as_nanos() / 1_000_000).map_err(|e| e.to_string())?;
    let a_offset = A_CLOCK_AT_ORIGIN_MS - origin_ms;
    let behind = i64::try_from(B_BEHIND.as_millis()).map_err(|e| e.to_string())?;
    let mut store = Store::new(&clk, &config);
    let mut a = Holder::new(&config, origin, a_offset);
    // A shuts down gracefully (closes its gate, releases the slot) a little
    // after its second renewal; B asks for the slot at once.
    let shutdown = origin + timing.renew_interval() * 2 + timing.renew_interval() / 5;
    a.shutdown_at = Some(shutdown);
    let mut b = Holder::new(
        &config,
        shutdown + Duration::from_millis(50),
        a_offset - behind,
    );
    sim::run(&mut store, &mut [&mut a, &mut b], shutdown + timing.ttl())?;

    let s = |t| secs(origin, t);
    let (a_open, ..) = a.opened().ok_or("A was never granted the slot")?;
    let (a_closed, _) = a.closed().ok_or("A never closed its gate")?;
    let (issued, released_at) = a
        .calls()
        .find_map(|e| match e {
            Event::Call {
                kind: "release",
                outcome: Outcome::Released,
                ceiling,
                at_store: Some(t),
                ..
            } => Some((*ceiling, *t)),
            _ => None,
        })
        .ok_or("A's release never reached the store")?;
    let a_last_ceiling = a
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                kind: "acquire" | "renew",
                outcome: Outcome::Granted { .. } | Outcome::Renewed,
                ceiling,
                ..
            } => Some(*ceiling),
            _ => None,
        })
        .last()
        .ok_or("A reported no ceiling")?;
    let (b_open, _, b_floor, _) = b.opened().ok_or("B was never granted the slot")?;
    if b_floor != issued {
        return Err(format!(
            "B was granted floor {b_floor}, A reported {issued}"
        ));
    }
    // B's first ID: its clock must pass the floor (rule 8), and B waits for
    // that only up to max_clock_skew.
    let b_clock_at_open = b.unix_ms(b_open);
    let wait = Duration::from_millis((b_floor.0 + 1).saturating_sub(b_clock_at_open));
    if wait > timing.max_clock_skew() {
        return Err(format!(
            "B would wait {wait:?}, beyond max_clock_skew: it would refuse"
        ));
    }
    let b_first = b_open + wait;

    // Plot: real time (A's clock) across, the time an ID carries up.
    let a_time = |t: f64| (A_CLOCK_AT_ORIGIN_MS as f64) / 1000.0 + t; // seconds, A's clock
    let x_axis = TimeAxis {
        x0: 150.0,
        x1: 860.0,
        t0: (s(a_closed) - 2.5).floor(),
        t1: (s(b_first) + 3.0).ceil(),
    };
    let (y_lo, y_hi) = (x_axis.t0 - 1.0, x_axis.t1 - 1.0);
    let (top, bottom) = (100.0, 320.0);
    let y = |id_secs_since_origin: f64| {
        bottom - (id_secs_since_origin - y_lo) / (y_hi - y_lo) * (bottom - top)
    };
    let x = |t: f64| x_axis.x(t);
    let id_of = |unix_ms: u64| unix_ms as f64 / 1000.0 - (A_CLOCK_AT_ORIGIN_MS as f64) / 1000.0;
    let label = |t: f64, minus: f64| clock(((a_time(t) - minus) * 1000.0).round() as u64, false);

    let mut svg = Svg::new(900.0, 500.0);
    svg.heading(
        "The floor across a hand-over: B's clock is 1 s behind, so B waits until it passes A's last ID",
        &[
            (BLUE, "A's IDs"),
            (ORANGE, "B's IDs"),
            (VERMILION, "the store's floor for the slot"),
            (GREY, "what B would issue without the floor"),
        ],
    );

    // Axes: the IDs' time up the side, both hosts' clocks along the bottom.
    svg.line((x_axis.x0, top - 10.0), (x_axis.x0, bottom), INK, 1.0, None);
    let mut v = y_lo.ceil();
    while v <= y_hi + 1e-9 {
        svg.line((x_axis.x0 - 5.0, y(v)), (x_axis.x1, y(v)), LIGHT, 1.0, None);
        svg.text(
            x_axis.x0 - 8.0,
            y(v) + 5.0,
            &label(v, 0.0),
            Anchor::End,
            13.0,
            INK,
            false,
        );
        v += 1.0;
    }
    svg.text(
        20.0,
        top - 22.0,
        "time in the ID",
        Anchor::Start,
        13.0,
        INK,
        true,
    );
    x_axis.draw(&mut svg, bottom, 1.0, |t| label(t, 0.0), BLUE);
    x_axis.draw(
        &mut svg,
        bottom + 34.0,
        1.0,
        |t| label(t, B_BEHIND.as_secs_f64()),
        ORANGE,
    );
    svg.text(
        20.0,
        bottom + 19.0,
        "A's clock",
        Anchor::Start,
        13.0,
        BLUE,
        true,
    );
    svg.text(
        20.0,
        bottom + 53.0,
        "B's clock",
        Anchor::Start,
        13.0,
        ORANGE,
        true,
    );
    svg.text(
        20.0,
        bottom + 73.0,
        "(same instants)",
        Anchor::Start,
        13.0,
        INK,
        false,
    );

    // A's IDs carry A's clock, up to the moment its gate closed.
    let a_from = s(a_open).max(x_axis.t0);
    let a_to = s(a_closed);
    svg.line(
        (x(a_from), y(a_from)),
        (x(a_to), y(id_of(issued.0))),
        BLUE,
        4.0,
        None,
    );
    svg.dot((x(a_to), y(id_of(issued.0))), 5.0, BLUE);
    svg.text(
        x(a_to) - 10.0,
        y(id_of(issued.0)) - 30.0,
        "A releases; its last ID",
        Anchor::End,
        13.0,
        BLUE,
        false,
    );
    svg.text(
        x(a_to) - 10.0,
        y(id_of(issued.0)) - 13.0,
        &clock(issued.0, true),
        Anchor::End,
        13.0,
        BLUE,
        false,
    );

    // The floor the store keeps from then on.
    let floor_y = y(id_of(b_floor.0));
    svg.line(
        (x(s(released_at)), floor_y),
        (x_axis.x1, floor_y),
        VERMILION,
        2.0,
        Some("6 4"),
    );
    svg.text(
        x_axis.x1,
        floor_y + 20.0,
        &format!("floor {} (the store keeps it)", clock(b_floor.0, true)),
        Anchor::End,
        13.0,
        VERMILION,
        true,
    );

    // B: granted with that floor, its clock behind it; it waits.
    let b_id_at = |t: f64| t - B_BEHIND.as_secs_f64();
    let (bo, bf) = (s(b_open), s(b_first));
    svg.line(
        (x(bo), y(b_id_at(bo))),
        (x(bf), y(b_id_at(bf))),
        GREY,
        3.0,
        Some("5 4"),
    );
    svg.text(
        x(bf) + 10.0,
        floor_y + 44.0,
        "without the floor, B would repeat A's",
        Anchor::Start,
        13.0,
        GREY,
        false,
    );
    svg.text(
        x(bf) + 10.0,
        floor_y + 61.0,
        &format!(
            "{} to {}",
            clock(b_clock_at_open, true),
            clock(issued.0, true)
        ),
        Anchor::Start,
        13.0,
        GREY,
        false,
    );
    svg.line(
        (x(bf), y(b_id_at(bf))),
        (x(x_axis.t1), y(b_id_at(x_axis.t1))),
        ORANGE,
        4.0,
        None,
    );
    svg.dot((x(bf), y(b_id_at(bf))), 5.0, ORANGE);
    svg.span(
        x(bo),
        x(bf),
        floor_y - 46.0,
        INK,
        &format!(
            "B granted, waits {} (≤ max_clock_skew {})",
            super::millis(wait),
            super::dur(timing.max_clock_skew())
        ),
        Anchor::End,
    );
    for t in [bo, bf] {
        svg.line(
            (x(t), floor_y - 42.0),
            (x(t), bottom),
            GREY,
            1.0,
            Some("2 3"),
        );
    }
    svg.text(
        x_axis.x1 - 100.0,
        y(b_id_at(x_axis.t1)) + 12.0,
        "B's IDs start above the floor",
        Anchor::End,
        13.0,
        ORANGE,
        true,
    );

    svg.notes(
        462.0,
        &[
            format!(
                "While A held the slot, each renewal raised the floor to A's ceiling (its last: {}, its deadline on A's clock);",
                clock(a_last_ceiling.0, true)
            ),
            "a release lowers it to what A actually issued. B starts strictly after max(floor, own clock).".to_owned(),
        ],
    );
    Ok(svg)
}
