//! `restart-guard.svg`: a store that forgets. It acknowledged A's renewal,
//! crashed and came back without A's row; A, cut off from it, generates
//! until its own deadline. The restart guard refuses every claim of the pool
//! until the restart span (the largest TTL plus twice the clock skew of any
//! holder) has passed since the store came back, so B is granted only after
//! A's deadline (DESIGN.md rule 12 and its "incarnation" paragraph).

use std::time::Duration;

use super::Params;
use super::dur;
use super::sim::{self, Event, Holder, Outcome, Store, secs};
use crate::svg::{Anchor, BLUE, GREY, INK, ORANGE, SKY, Svg, TimeAxis, VERMILION, seconds};

const A_Y: f64 = 120.0;
const STORE_Y: f64 = 215.0;
const B_Y: f64 = 310.0;

/// How long the store is down.
const DOWN_FOR: Duration = Duration::from_secs(1);

pub(super) fn draw(p: &Params) -> Result<Svg, String> {
    let config = p.config()?;
    let timing = config.timing().clone();
    let (clock, origin) = sim::clock();
    let mut store = Store::new(&clock, &config);
    let mut a = Holder::new(&config, origin, 0);
    // The store crashes a little after it acknowledged A's second renewal,
    // and loses it; A is cut off from the store from the crash on.
    let crash = origin + timing.renew_interval() * 2 + sim::ONE_WAY * 3;
    let up = crash + DOWN_FOR;
    store.restart(crash, up);
    a.cut_from = Some(crash);
    let mut b = Holder::new(&config, up + Duration::from_millis(500), 0);
    let guard_until = store.guard_until().ok_or("the store did not restart")?;
    sim::run(
        &mut store,
        &mut [&mut a, &mut b],
        guard_until + timing.ttl(),
    )?;

    let s = |t| secs(origin, t);
    let (a_open, ..) = a.opened().ok_or("A was never granted the slot")?;
    let (a_closed, _) = a.closed().ok_or("A's gate never closed")?;
    let a_deadline = a.last_deadline().ok_or("A had no deadline")?;
    let (a_first_write, forgotten_expiry, last_ack) = {
        let acked: Vec<(f64, f64)> = a
            .calls()
            .filter_map(|e| match e {
                Event::Call {
                    at_store: Some(t),
                    expiry: Some(x),
                    outcome: Outcome::Granted { .. } | Outcome::Renewed,
                    ..
                } => Some((s(*t), s(*x))),
                _ => None,
            })
            .collect();
        let first = acked.first().ok_or("the store never granted A")?.0;
        let &(last_t, last_x) = acked.last().ok_or("the store never granted A")?;
        (first, last_x, last_t)
    };
    let a_failed: Vec<f64> = a
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                sent,
                outcome: Outcome::Unanswered,
                ..
            } => Some(s(*sent)),
            _ => None,
        })
        .collect();
    let b_refused: Vec<f64> = b
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                at_store: Some(t),
                outcome: Outcome::Refused(_),
                ..
            } => Some(s(*t)),
            _ => None,
        })
        .collect();
    let (b_open, ..) = b.opened().ok_or("B was never granted the slot")?;
    let b_at_store = b
        .calls()
        .find_map(|e| match e {
            Event::Call {
                at_store: Some(t),
                outcome: Outcome::Granted { .. },
                ..
            } => Some(s(*t)),
            _ => None,
        })
        .ok_or("B's grant never reached the store")?;
    if b_open <= a_deadline {
        return Err("B was granted before A's deadline".into());
    }
    let (crash, up, guard_until) = (s(crash), s(up), s(guard_until));
    let span = config.pool().restart_span();

    let mut svg = Svg::new(900.0, 480.0);
    svg.heading(
        "The restart guard: a store that forgot grants nothing until no forgotten holder can still run",
        &[
            (SKY, "A's gate open"),
            (ORANGE, "B's gate open"),
            (GREY, "store down, then forgotten lease"),
            (VERMILION, "claims refused by the restart guard"),
        ],
    );
    let axis = TimeAxis {
        x0: 110.0,
        x1: 870.0,
        t0: 0.0,
        t1: (s(b_open) + p.ttl.as_secs_f64() / 5.0).ceil(),
    };
    let x = |t: f64| axis.x(t);
    axis.lanes(
        &mut svg,
        &[(A_Y, "holder A"), (STORE_Y, "store"), (B_Y, "holder B")],
    );

    // Holder A: cut off from the store, it generates until its deadline.
    svg.rect(
        x(s(a_open)),
        A_Y - 6.0,
        x(s(a_closed)) - x(s(a_open)),
        12.0,
        SKY,
        Some(BLUE),
    );
    for &t in &a_failed {
        svg.cross((x(t), A_Y + 22.0), 4.0, VERMILION);
    }
    if let Some(&first) = a_failed.first() {
        svg.text(
            x(first) - 12.0,
            A_Y + 27.0,
            "cut off: renewals unanswered",
            Anchor::End,
            13.0,
            VERMILION,
            false,
        );
    }
    svg.line(
        (x(s(a_deadline)), A_Y - 14.0),
        (x(s(a_deadline)), A_Y + 14.0),
        VERMILION,
        2.0,
        None,
    );
    svg.text(
        x(s(a_deadline)),
        A_Y - 20.0,
        &format!("A's deadline {}: gate closes", seconds(s(a_deadline))),
        Anchor::Middle,
        13.0,
        INK,
        true,
    );

    // The store: A's lease until the crash, down, back without A's row.
    svg.rect(
        x(a_first_write),
        STORE_Y - 7.0,
        x(crash) - x(a_first_write),
        14.0,
        SKY,
        Some(BLUE),
    );
    svg.rect(x(crash), STORE_Y - 7.0, x(up) - x(crash), 14.0, GREY, None);
    svg.rect(
        x(up),
        STORE_Y - 7.0,
        x(forgotten_expiry) - x(up),
        14.0,
        "#FFFFFF",
        Some(GREY),
    );
    svg.line(
        (x(last_ack), STORE_Y - 9.0),
        (x(last_ack), STORE_Y + 9.0),
        INK,
        2.0,
        None,
    );
    svg.text(
        x(last_ack),
        STORE_Y - 14.0,
        &format!("acknowledged A's renewal at {}", seconds(last_ack)),
        Anchor::End,
        13.0,
        BLUE,
        false,
    );
    svg.text(
        x(crash) + 2.0,
        STORE_Y - 14.0,
        &format!("crash {}, back {}: forgot it", seconds(crash), seconds(up)),
        Anchor::Start,
        13.0,
        INK,
        true,
    );
    svg.text(
        x(up) + 4.0,
        STORE_Y + 25.0,
        &format!(
            "A's forgotten lease would have ended {}",
            seconds(forgotten_expiry)
        ),
        Anchor::Start,
        13.0,
        GREY,
        false,
    );
    svg.hatch(
        x(up),
        STORE_Y + 36.0,
        x(guard_until) - x(up),
        12.0,
        VERMILION,
    );
    svg.span(
        x(up),
        x(guard_until),
        STORE_Y + 66.0,
        INK,
        &format!(
            "restart span {} = TTL {} + 2 × max_clock_skew {}",
            dur(span),
            dur(timing.ttl()),
            dur(timing.max_clock_skew())
        ),
        Anchor::Middle,
    );
    svg.rect(
        x(b_at_store),
        STORE_Y - 7.0,
        axis.x1 - x(b_at_store),
        14.0,
        ORANGE,
        None,
    );
    svg.line(
        (x(up), STORE_Y + 8.0),
        (x(up), B_Y - 6.0),
        GREY,
        1.0,
        Some("2 3"),
    );
    svg.line(
        (x(guard_until), STORE_Y - 8.0),
        (x(guard_until), B_Y + 10.0),
        VERMILION,
        1.5,
        Some("5 3"),
    );

    // Holder B: refused until the guard lets it through.
    for &t in &b_refused {
        svg.cross((x(t), B_Y), 4.0, VERMILION);
    }
    if let Some(&first) = b_refused.first() {
        svg.text(
            x(first),
            B_Y + 26.0,
            "B's claim: StoreRestarted (retryable), until the guard opens",
            Anchor::Start,
            13.0,
            VERMILION,
            false,
        );
    }
    svg.rect(
        x(s(b_open)),
        B_Y - 6.0,
        axis.x1 - x(s(b_open)),
        12.0,
        ORANGE,
        None,
    );
    svg.text_fit(
        x(s(b_open)),
        B_Y - 14.0,
        &format!("B granted {}", seconds(s(b_open))),
        INK,
        true,
    );

    axis.draw(&mut svg, 375.0, axis.step(), seconds, INK);
    let notes = [
        "The guard reads the store's incarnation (its start time): after a restart it refuses every claim of the pool \
         for the span."
            .to_owned(),
        format!(
            "The span outlasts every forgotten lease: A's deadline {} and its lease's end {} both come before {}.",
            seconds(s(a_deadline)),
            seconds(forgotten_expiry),
            seconds(guard_until),
        ),
        "Had A's renewals reached the restarted store they would be answered Lost and A would stop sooner; \
         the guard cannot count on it."
            .to_owned(),
    ];
    svg.notes(430.0, &notes);
    Ok(svg)
}
