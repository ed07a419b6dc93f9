//! `lease-timeline.svg`: one holder's lease on a time axis (DESIGN.md
//! timing rules 1–5): the deadline counts from each request's send time, the
//! store's TTL from when it wrote the request, and the gate closes at the
//! last deadline, a margin before the store's expiry.

use leasehold_core::{
    CLOCK_RATE_BOUND_PPM, COARSE_CLOCK_SLACK, Memory, Strategy, min_safety_margin,
};

use super::sim::{self, Event, Holder, ONE_WAY, Outcome, Store, secs};
use super::{Params, dur, millis};
use crate::svg::{Anchor, BLUE, GREY, INK, ORANGE, SKY, Svg, TimeAxis, VERMILION, seconds};

const HOLDER_Y: f64 = 150.0;
const STORE_Y: f64 = 250.0;

pub(super) fn draw(p: &Params) -> Result<Svg, String> {
    let config = p.config()?;
    let timing = config.timing().clone();
    let (clock, origin) = sim::clock();
    let mut store = Store::new(&clock, &config);
    let mut a = Holder::new(&config, origin, 0);
    // Two renewals get through; from halfway to the third one, no call
    // reaches the store.
    a.cut_from = Some(origin + timing.renew_interval() * 5 / 2);
    sim::run(&mut store, &mut [&mut a], origin + timing.ttl() * 4)?;

    let s = |t| secs(origin, t);
    let (open_at, _, _, first_deadline) = a.opened().ok_or("the lease was never granted")?;
    let (closed_at, _) = a.closed().ok_or("the gate never closed")?;
    let last_deadline = a.last_deadline().ok_or("no deadline")?;
    let granted: Vec<(f64, f64, f64, f64)> = a
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                sent,
                at_store: Some(st),
                answered,
                outcome: Outcome::Granted { .. } | Outcome::Renewed,
                expiry: Some(x),
                ..
            } => Some((s(*sent), s(*st), s(*answered), s(*x))),
            _ => None,
        })
        .collect();
    let failed: Vec<(f64, f64)> = a
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                sent,
                answered,
                outcome: Outcome::Unanswered,
                ..
            } => Some((s(*sent), s(*answered))),
            _ => None,
        })
        .collect();
    let deadlines: Vec<(f64, f64)> = a
        .log
        .iter()
        .filter_map(|e| match e {
            Event::Open { deadline, .. } | Event::Extend { deadline, .. } => Some(*deadline),
            _ => None,
        })
        .zip(granted.iter())
        .map(|(d, g)| (s(d), g.0))
        .collect();
    let &(_, first_write, _, _) = granted.first().ok_or("no grant")?;
    let &(_, last_write, _, expiry) = granted.last().ok_or("no grant")?;

    let mut svg = Svg::new(900.0, 460.0);
    svg.heading(
        "One lease: the deadline counts from the send time, the gate closes a margin early",
        &[
            (SKY, "gate open: IDs issued"),
            (ORANGE, "lease as the store keeps it"),
            (BLUE, "request and answer"),
            (VERMILION, "renewal with no answer"),
        ],
    );
    let axis = TimeAxis {
        x0: 100.0,
        x1: 860.0,
        t0: 0.0,
        t1: (expiry + p.ttl.as_secs_f64() / 5.0).ceil(),
    };
    let x = |t: f64| axis.x(t);

    // Lanes.
    axis.lanes(&mut svg, &[(HOLDER_Y, "holder"), (STORE_Y, "store")]);
    svg.rect(
        x(s(open_at)),
        HOLDER_Y - 7.0,
        x(s(closed_at)) - x(s(open_at)),
        14.0,
        SKY,
        None,
    );
    svg.rect(
        x(first_write),
        STORE_Y - 7.0,
        x(expiry) - x(first_write),
        14.0,
        ORANGE,
        None,
    );

    // The first lease's arithmetic: TTL from sent_at, less the margin.
    let sent0 = granted[0].0;
    let ttl = timing.ttl().as_secs_f64();
    let margin = timing.safety_margin().as_secs_f64();
    svg.span(
        x(sent0),
        x(sent0 + ttl),
        84.0,
        INK,
        &format!("TTL {}", dur(timing.ttl())),
        Anchor::Middle,
    );
    svg.arrow(
        (x(sent0 + ttl - margin) - 14.0, 104.0),
        (x(sent0 + ttl - margin), 104.0),
        INK,
        None,
    );
    svg.arrow(
        (x(sent0 + ttl) + 14.0, 104.0),
        (x(sent0 + ttl), 104.0),
        INK,
        None,
    );
    svg.line(
        (x(sent0 + ttl - margin), 104.0),
        (x(sent0 + ttl), 104.0),
        INK,
        1.5,
        None,
    );
    svg.text(
        x(sent0 + ttl) + 18.0,
        108.0,
        &format!("margin {}", dur(timing.safety_margin())),
        Anchor::Start,
        13.0,
        INK,
        false,
    );
    for t in [sent0, sent0 + ttl] {
        svg.line((x(t), 78.0), (x(t), HOLDER_Y - 8.0), GREY, 1.0, Some("3 3"));
    }

    // Sends and deadlines.
    for (i, &(sent, ..)) in granted.iter().enumerate() {
        let what = if i == 0 { "sent_at" } else { "renew" };
        svg.text(
            x(sent),
            106.0,
            &format!("{what} {}", seconds(sent)),
            Anchor::Middle,
            13.0,
            BLUE,
            false,
        );
    }
    for &(d, _) in &deadlines {
        svg.line(
            (x(d), HOLDER_Y - 12.0),
            (x(d), HOLDER_Y + 12.0),
            VERMILION,
            2.0,
            None,
        );
        svg.text(
            x(d),
            128.0,
            &format!("deadline {}", seconds(d)),
            Anchor::Middle,
            13.0,
            VERMILION,
            false,
        );
    }

    // Calls.
    for &(sent, at_store, answered, _) in &granted {
        svg.arrow(
            (x(sent), HOLDER_Y + 8.0),
            (x(at_store), STORE_Y - 8.0),
            BLUE,
            None,
        );
        svg.arrow(
            (x(at_store), STORE_Y - 8.0),
            (x(answered), HOLDER_Y + 8.0),
            BLUE,
            Some("4 3"),
        );
        svg.line(
            (x(at_store), STORE_Y - 9.0),
            (x(at_store), STORE_Y + 9.0),
            INK,
            2.0,
            None,
        );
    }
    for &(sent, _) in &failed {
        svg.line(
            (x(sent), HOLDER_Y + 8.0),
            (x(sent) + 8.0, 196.0),
            VERMILION,
            1.5,
            None,
        );
        svg.cross((x(sent) + 8.0, 200.0), 4.0, VERMILION);
    }
    if let Some(&(first_fail, _)) = failed.first() {
        svg.text(
            x(first_fail),
            226.0,
            "no answer: retried with backoff",
            Anchor::Start,
            13.0,
            VERMILION,
            false,
        );
    }

    // The store's side.
    svg.text(
        x(first_write),
        STORE_Y + 26.0,
        &format!(
            "written {} after sent_at: TTL counts from here",
            millis(ONE_WAY)
        ),
        Anchor::Start,
        13.0,
        INK,
        false,
    );
    svg.text_fit(
        x(expiry) + 5.0,
        STORE_Y + 26.0,
        &format!("expires {}", seconds(expiry)),
        ORANGE,
        false,
    );
    let closed = s(closed_at);
    svg.line(
        (x(closed), HOLDER_Y - 12.0),
        (x(closed), STORE_Y + 40.0),
        INK,
        1.5,
        Some("5 3"),
    );
    svg.line(
        (x(expiry), STORE_Y + 8.0),
        (x(expiry), STORE_Y + 40.0),
        ORANGE,
        1.5,
        Some("5 3"),
    );
    svg.span(
        x(closed),
        x(expiry),
        STORE_Y + 54.0,
        INK,
        "",
        Anchor::Middle,
    );
    svg.text(
        x(closed) - 8.0,
        STORE_Y + 58.0,
        &format!(
            "gate closes {} (last deadline): no more IDs",
            seconds(closed)
        ),
        Anchor::End,
        13.0,
        INK,
        true,
    );
    svg.text(
        x(expiry),
        STORE_Y + 78.0,
        &format!(
            "gap {} = margin {} + {} on the way to the store",
            seconds(expiry - closed),
            dur(timing.safety_margin()),
            millis(ONE_WAY)
        ),
        Anchor::End,
        13.0,
        INK,
        false,
    );

    axis.draw(&mut svg, 350.0, axis.step(), seconds, INK);

    // Where the numbers come from.
    let resolution = Memory::new().capabilities().time_resolution;
    let minimum = min_safety_margin(timing.ttl(), resolution);
    let drift = minimum - resolution - COARSE_CLOCK_SLACK;
    svg.notes(
        402.0,
        &[
            format!(
                "deadline = sent_at + TTL − margin ({} + {} − {} = {}); renewals every {} from the last send.",
                seconds(sent0),
                dur(timing.ttl()),
                dur(timing.safety_margin()),
                seconds(s(first_deadline)),
                dur(timing.renew_interval()),
            ),
            format!(
                "The store expires the lease a TTL after it wrote the last renewal: {} + {} = {}.",
                seconds(last_write),
                dur(timing.ttl()),
                seconds(expiry),
            ),
            format!(
                "margin {} (default) ≥ minimum {} = clock drift {} ({CLOCK_RATE_BOUND_PPM} ppm of the TTL) \
                 + store resolution {} + clock ticks {}.",
                dur(timing.safety_margin()),
                millis(minimum),
                millis(drift),
                millis(resolution),
                millis(COARSE_CLOCK_SLACK),
            ),
        ],
    );
    if (s(last_deadline) - closed).abs() > 1e-3 {
        return Err(format!(
            "the gate closed at {closed} s, not at the last deadline {} s",
            s(last_deadline)
        ));
    }
    Ok(svg)
}
