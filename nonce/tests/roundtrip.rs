//! Property tests: decoding, text forms and UUIDv7 round-trip.

use std::time::{Duration, UNIX_EPOCH};

use leasehold_nonce::*;
use proptest::prelude::*;

/// A valid layout of `bits`, and field values that fit it.
fn layout_and_fields() -> impl Strategy<Value = (Layout, u64, u32, u128)> {
    (
        prop_oneof![Just(64u32), Just(96), Just(128)],
        0u32..=1,
        41u32..=44,
        0u32..=12,
    )
        .prop_flat_map(|(bits, reserved, ts, slot)| {
            let layout = Layout::builder(bits)
                .reserved_bits(reserved)
                .timestamp_bits(ts)
                .slot_bits(slot)
                .epoch_unix_ms(1_600_000_000_000)
                .build()
                .unwrap();
            let ctr = layout.counter_bits();
            let ctr_max = if ctr >= 128 {
                u128::MAX
            } else {
                (1u128 << ctr) - 1
            };
            (
                Just(layout),
                0..(1u64 << ts),
                0..=((1u64 << slot) - 1) as u32,
                0..=ctr_max,
            )
        })
}

fn compose(l: &Layout, ms: u64, slot: u32, ctr: u128) -> u128 {
    (u128::from(ms) << (l.slot_bits() + l.counter_bits()))
        | (u128::from(slot) << l.counter_bits())
        | ctr
}

proptest! {
    #[test]
    fn decode_round_trips((l, ms, slot, ctr) in layout_and_fields()) {
        let v = compose(&l, ms, slot, ctr);
        let p = l.decode(v);
        prop_assert_eq!((p.millis, p.slot, p.counter), (ms, slot, ctr));
        prop_assert_eq!(p.time, UNIX_EPOCH + Duration::from_millis(1_600_000_000_000 + ms));
        prop_assert_eq!(v.checked_shr(l.bits() - l.reserved_bits()).unwrap_or(0), 0);
    }

    #[test]
    fn nonce64_text_round_trips(v: u64) {
        let n = Nonce64(v);
        prop_assert_eq!(n.to_string().parse::<Nonce64>().unwrap(), n);
        prop_assert_eq!(n.base32().to_string().parse::<Nonce64>().unwrap(), n);
        prop_assert_eq!(n.base32().to_string().to_lowercase().parse::<Nonce64>().unwrap(), n);
        prop_assert_eq!(Nonce64::from_bytes(n.to_bytes()), n);
    }

    #[test]
    fn nonce96_text_round_trips(v in 0u128..(1u128 << 96)) {
        let n = Nonce96::new(v).unwrap();
        prop_assert_eq!(n.to_string().parse::<Nonce96>().unwrap(), n);
        prop_assert_eq!(n.base32().to_string().parse::<Nonce96>().unwrap(), n);
        prop_assert_eq!(Nonce96::from_bytes(n.to_bytes()), n);
    }

    #[test]
    fn nonce128_text_round_trips(v: u128) {
        let n = Nonce128(v);
        prop_assert_eq!(n.to_string().parse::<Nonce128>().unwrap(), n);
        prop_assert_eq!(n.base32().to_string().parse::<Nonce128>().unwrap(), n);
        prop_assert_eq!(Nonce128::from_bytes(n.to_bytes()), n);
    }

    #[test]
    fn text_order_is_numeric_order(a: u64, b: u64) {
        let (x, y) = (Nonce64(a), Nonce64(b));
        prop_assert_eq!(x.cmp(&y), x.to_string().cmp(&y.to_string()));
        prop_assert_eq!(x.cmp(&y), x.base32().to_string().cmp(&y.base32().to_string()));
    }

    #[test]
    fn uuid7_round_trips(ms in 0u64..(1 << 42), slot in 0u32..512, seq in 0u128..(1 << 22)) {
        let l = Layout::default128();
        let n = Nonce128(compose(&l, ms, slot, seq));
        let u = Uuid7::from_nonce(&l, n).unwrap();
        prop_assert_eq!(u.to_nonce(&l), n);
        prop_assert_eq!(u.slot(&l), slot);
        prop_assert_eq!(u.unix_millis(), DEFAULT_EPOCH_UNIX_MS + ms);
        prop_assert_eq!(u.to_string().parse::<Uuid7>().unwrap(), u);
        prop_assert_eq!(Uuid7::from_bytes(u.to_bytes()), Some(u));
    }
}
