//! `paused-holder-fence.svg`: holder A is frozen past its deadline, the
//! store expires its lease and grants the slot to B with a larger fence; A
//! wakes to a closed gate, and the write it had in hand, carrying the old
//! fence, is refused by the resource B has written to (DESIGN.md rules 1, 5
//! and 7).

use leasehold_core::Fence;

use super::Params;
use super::sim::{self, Event, Holder, ONE_WAY, Outcome, Store, secs};
use crate::svg::{Anchor, BLUE, GREEN, GREY, INK, ORANGE, SKY, Svg, TimeAxis, VERMILION, seconds};

const A_Y: f64 = 110.0;
const STORE_Y: f64 = 190.0;
const B_Y: f64 = 270.0;
const RES_Y: f64 = 350.0;

/// A resource that checks fences (`FenceTable`'s rule for one pool and
/// slot): a write is accepted when its fence is at least the largest one
/// it has accepted.
#[derive(Default)]
struct Resource {
    newest: Option<Fence>,
}

impl Resource {
    fn write(&mut self, fence: Fence) -> bool {
        let ok = self.newest.is_none_or(|n| fence >= n);
        if ok {
            self.newest = Some(fence);
        }
        ok
    }
}

pub(super) fn draw(p: &Params) -> Result<Svg, String> {
    let config = p.config()?;
    let timing = config.timing().clone();
    let (clock, origin) = sim::clock();
    let mut store = Store::new(&clock, &config);
    let mut a = Holder::new(&config, origin, 0);
    // A freezes halfway to its second renewal and wakes two TTLs after it
    // started: far past its deadline and the store's expiry.
    let pause_from = origin + timing.renew_interval() * 3 / 2;
    let wake = origin + timing.ttl() * 2;
    a.pause = Some((pause_from, wake));
    // B wants the slot from a second after A froze.
    let mut b = Holder::new(&config, pause_from + timing.ttl() / 10, 0);
    sim::run(&mut store, &mut [&mut a, &mut b], wake + timing.ttl() / 10)?;

    let s = |t| secs(origin, t);
    let (a_open, a_fence, _, _) = a.opened().ok_or("A was never granted the slot")?;
    let a_deadline = a.last_deadline().ok_or("A had no deadline")?;
    let (a_closed, _) = a.closed().ok_or("A's gate never closed")?;
    let (b_open, b_fence, _, _) = b.opened().ok_or("B was never granted the slot")?;
    let a_expiry = a
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                expiry: Some(x), ..
            } => Some(*x),
            _ => None,
        })
        .last()
        .ok_or("the store never kept A's lease")?;
    let b_write_store = b
        .calls()
        .find_map(|e| match e {
            Event::Call {
                outcome: Outcome::Granted { .. },
                at_store,
                ..
            } => *at_store,
            _ => None,
        })
        .ok_or("B's grant never reached the store")?;
    let refused: Vec<f64> = b
        .calls()
        .filter_map(|e| match e {
            Event::Call {
                outcome: Outcome::Refused(_),
                at_store: Some(t),
                ..
            } => Some(s(*t)),
            _ => None,
        })
        .collect();

    // The writes: A's while it holds the lease, B's once granted, and the
    // one A had prepared before it froze, sent when it wakes.
    let mut resource = Resource::default();
    let a_write = (
        s(pause_from) - 1.0,
        s(pause_from) - 1.0 + ONE_WAY.as_secs_f64(),
    );
    let b_write = (s(b_open) + 0.5, s(b_open) + 0.5 + ONE_WAY.as_secs_f64());
    let late = (s(wake), s(wake) + ONE_WAY.as_secs_f64());
    let writes = [
        (
            A_Y,
            a_write,
            a_fence,
            "A writes, fence",
            resource.write(a_fence),
        ),
        (
            B_Y,
            b_write,
            b_fence,
            "B writes, fence",
            resource.write(b_fence),
        ),
        (
            A_Y,
            late,
            a_fence,
            "A's late write, fence",
            resource.write(a_fence),
        ),
    ];
    if writes[2].4 || !writes[1].4 {
        return Err("the resource did not refuse the old fence after the new one".into());
    }

    let mut svg = Svg::new(900.0, 490.0);
    svg.heading(
        "A paused holder: its gate is closed when it wakes, and the fence stops its late write",
        &[
            (SKY, "A's gate open"),
            (ORANGE, "B's gate open"),
            (GREY, "A paused (GC, SIGSTOP)"),
            (GREEN, "write accepted"),
            (VERMILION, "refused"),
        ],
    );
    let axis = TimeAxis {
        x0: 110.0,
        x1: 870.0,
        t0: 0.0,
        t1: (s(wake) + p.ttl.as_secs_f64() / 5.0).ceil(),
    };
    let x = |t: f64| axis.x(t);
    axis.lanes(
        &mut svg,
        &[
            (A_Y, "holder A"),
            (STORE_Y, "store"),
            (B_Y, "holder B"),
            (RES_Y, "resource"),
        ],
    );

    // Holder A.
    svg.hatch(
        x(s(pause_from)),
        A_Y - 14.0,
        x(s(wake)) - x(s(pause_from)),
        28.0,
        GREY,
    );
    svg.rect(
        x(s(a_open)),
        A_Y - 5.0,
        x(s(a_deadline)) - x(s(a_open)),
        10.0,
        SKY,
        Some(BLUE),
    );
    svg.text(
        x(s(pause_from)),
        A_Y - 20.0,
        &format!("A paused for {}", seconds(s(wake) - s(pause_from))),
        Anchor::Start,
        13.0,
        INK,
        false,
    );
    svg.line(
        (x(s(a_deadline)), A_Y - 14.0),
        (x(s(a_deadline)), A_Y + 14.0),
        VERMILION,
        2.0,
        None,
    );
    svg.text(
        x(s(a_deadline)),
        A_Y + 30.0,
        &format!("A's deadline {} passes", seconds(s(a_deadline))),
        Anchor::Middle,
        13.0,
        VERMILION,
        false,
    );
    svg.text(
        x(s(a_closed)) + 10.0,
        A_Y - 20.0,
        "wakes: gate closed, no IDs",
        Anchor::End,
        13.0,
        VERMILION,
        true,
    );
    svg.cross((x(s(a_closed)), A_Y), 6.0, VERMILION);

    // The store.
    let a_at_store = s(a_open) - ONE_WAY.as_secs_f64();
    svg.rect(
        x(a_at_store),
        STORE_Y - 7.0,
        x(s(a_expiry)) - x(a_at_store),
        14.0,
        SKY,
        Some(BLUE),
    );
    svg.rect(
        x(s(b_write_store)),
        STORE_Y - 7.0,
        axis.x1 - x(s(b_write_store)),
        14.0,
        ORANGE,
        None,
    );
    svg.text(
        x(a_at_store) + 4.0,
        STORE_Y - 13.0,
        &format!("A's lease, fence {}", a_fence.0),
        Anchor::Start,
        13.0,
        BLUE,
        false,
    );
    svg.text(
        x(s(a_expiry)) - 4.0,
        STORE_Y + 24.0,
        &format!("expires {} by the store's clock", seconds(s(a_expiry))),
        Anchor::End,
        13.0,
        BLUE,
        false,
    );
    svg.text(
        x(s(b_write_store)) + 4.0,
        STORE_Y - 13.0,
        &format!("B's lease, fence {}", b_fence.0),
        Anchor::Start,
        13.0,
        ORANGE,
        false,
    );

    // Holder B.
    for &t in &refused {
        svg.cross((x(t), B_Y), 4.0, VERMILION);
    }
    if let Some(&first) = refused.first() {
        svg.text(
            x(first),
            B_Y + 24.0,
            "B's claims refused: slot held",
            Anchor::Start,
            13.0,
            VERMILION,
            false,
        );
    }
    svg.rect(
        x(s(b_open)),
        B_Y - 5.0,
        axis.x1 - x(s(b_open)),
        10.0,
        ORANGE,
        None,
    );
    svg.text(
        x(s(b_open)),
        B_Y - 12.0,
        &format!("B granted {}, fence {}", seconds(s(b_open)), b_fence.0),
        Anchor::Middle,
        13.0,
        INK,
        false,
    );

    // The resource.
    for (y, (sent, arrives), fence, what, ok) in writes {
        let colour = if ok { GREEN } else { VERMILION };
        svg.arrow(
            (x(sent), y + 8.0),
            (x(arrives), RES_Y - 6.0),
            colour,
            Some("4 3"),
        );
        if ok {
            svg.dot((x(arrives), RES_Y), 5.0, GREEN);
        } else {
            svg.cross((x(arrives), RES_Y), 6.0, VERMILION);
        }
        let label = if ok {
            format!("{what} {}: accepted", fence.0)
        } else {
            format!("{what} {} < {}: refused", fence.0, b_fence.0)
        };
        if ok {
            svg.text(
                x(arrives) + 8.0,
                RES_Y + 24.0,
                &label,
                Anchor::Start,
                13.0,
                colour,
                false,
            );
        } else {
            svg.text(
                x(arrives) + 10.0,
                RES_Y + 44.0,
                &label,
                Anchor::End,
                13.0,
                colour,
                true,
            );
        }
    }

    axis.draw(&mut svg, 425.0, axis.step(), seconds, INK);
    svg.notes(
        475.0,
        &[format!(
            "TTL {}, margin {}: A's deadline is its last renewal's send + TTL − margin; the store expires the lease \
             TTL after it wrote it.",
            super::dur(timing.ttl()),
            super::dur(timing.safety_margin()),
        )],
    );
    Ok(svg)
}
