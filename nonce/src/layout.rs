//! Where the timestamp, slot and counter sit in a nonce, and decoding.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::LayoutError;

/// The default epoch: 2025-01-01T00:00:00Z, in milliseconds since the UNIX epoch.
pub const DEFAULT_EPOCH_UNIX_MS: u64 = 1_735_689_600_000;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The bit layout of a nonce, most significant first: `reserved` zero bits,
/// the timestamp (milliseconds since `epoch`), the slot (the leased machine
/// ID), the counter.
///
/// ```
/// use leasehold_nonce::Layout;
/// let l = Layout::default64();
/// assert_eq!((l.timestamp_bits(), l.slot_bits(), l.counter_bits()), (42, 9, 13));
/// let snowflake = Layout::snowflake();
/// assert_eq!(
///     (snowflake.reserved_bits(), snowflake.timestamp_bits(), snowflake.slot_bits(), snowflake.counter_bits()),
///     (1, 41, 10, 12)
/// );
/// let err = Layout::builder(64).timestamp_bits(42).slot_bits(10).counter_bits(13).build().unwrap_err();
/// assert_eq!(err.field, "counter_bits");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    bits: u32,
    reserved_bits: u32,
    timestamp_bits: u32,
    slot_bits: u32,
    counter_bits: u32,
    epoch_unix_ms: u64,
}

/// A nonce taken apart by [`Layout::decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// The timestamp as a time (millisecond precision).
    pub time: SystemTime,
    /// The timestamp field: milliseconds since the layout's epoch.
    pub millis: u64,
    /// The slot (machine ID) that made it.
    pub slot: u32,
    /// The counter field.
    pub counter: u128,
}

/// The layout's timestamp field runs out within a year of the time checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverflowWarning {
    /// The layout's timestamp bits.
    pub timestamp_bits: u32,
    /// When the field runs out.
    pub overflows_at: SystemTime,
}

impl fmt::Display for OverflowWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self
            .overflows_at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        write!(
            f,
            "the {}-bit nonce timestamp runs out within a year (at UNIX time {secs} s); \
             generation will then fail: move the epoch later or widen timestamp_bits",
            self.timestamp_bits
        )
    }
}

impl Layout {
    const fn fixed(bits: u32, reserved: u32, ts: u32, slot: u32) -> Self {
        Self {
            bits,
            reserved_bits: reserved,
            timestamp_bits: ts,
            slot_bits: slot,
            counter_bits: bits - reserved - ts - slot,
            epoch_unix_ms: DEFAULT_EPOCH_UNIX_MS,
        }
    }

    /// 64 bits: 42 timestamp, 9 slot (512 IDs), 13 counter; epoch 2025-01-01.
    pub const fn default64() -> Self {
        Self::fixed(64, 0, 42, 9)
    }

    /// 96 bits: 42 timestamp, 9 slot, 45 counter; epoch 2025-01-01.
    pub const fn default96() -> Self {
        Self::fixed(96, 0, 42, 9)
    }

    /// 128 bits: 42 timestamp, 9 slot, 77 counter; epoch 2025-01-01.
    pub const fn default128() -> Self {
        Self::fixed(128, 0, 42, 9)
    }

    /// The default layout for a width of 64, 96 or 128 bits.
    pub fn default_for(bits: u32) -> Result<Self, LayoutError> {
        Self::builder(bits).build()
    }

    /// The classic Snowflake layout: 1 reserved (sign) bit, 41 timestamp,
    /// 10 slot, 12 counter; epoch 2025-01-01 (change it with the builder).
    pub const fn snowflake() -> Self {
        Self::fixed(64, 1, 41, 10)
    }

    /// A builder for a custom layout of `bits` (64, 96 or 128); starts from the
    /// default 42-bit timestamp and 9-bit slot, the counter taking the rest.
    pub fn builder(bits: u32) -> LayoutBuilder {
        LayoutBuilder {
            bits,
            reserved_bits: 0,
            timestamp_bits: 42,
            slot_bits: 9,
            counter_bits: None,
            epoch_unix_ms: DEFAULT_EPOCH_UNIX_MS,
            pool_size: None,
        }
    }

    /// 64, 96 or 128.
    pub const fn bits(&self) -> u32 {
        self.bits
    }
    /// Leading zero bits.
    pub const fn reserved_bits(&self) -> u32 {
        self.reserved_bits
    }
    /// Timestamp bits (milliseconds since the epoch).
    pub const fn timestamp_bits(&self) -> u32 {
        self.timestamp_bits
    }
    /// Slot bits: the pool may have up to `2^slot_bits` slots.
    pub const fn slot_bits(&self) -> u32 {
        self.slot_bits
    }
    /// Counter bits.
    pub const fn counter_bits(&self) -> u32 {
        self.counter_bits
    }
    /// The epoch in milliseconds since the UNIX epoch.
    pub const fn epoch_unix_ms(&self) -> u64 {
        self.epoch_unix_ms
    }

    /// The ID format to declare in the lease configuration
    /// (`LeaseConfig::builder(..).id_format(layout.id_format())`): the store
    /// records it for the pool and refuses a process whose layout or epoch
    /// differs, naming both, and a generator of another layout cannot use
    /// the lease.
    ///
    /// ```
    /// use leasehold_nonce::Layout;
    /// let text = Layout::default64().id_format().text().to_owned();
    /// assert_eq!(
    ///     text,
    ///     "leasehold layout: 64 bits = reserved 0 + timestamp 42 + slot 9 + counter 13; \
    ///      epoch 1735689600000 ms after 1970"
    /// );
    /// assert_ne!(Layout::default96().id_format(), Layout::default64().id_format());
    /// ```
    pub fn id_format(&self) -> leasehold_core::IdFormat {
        let text = format!(
            "leasehold layout: {} bits = reserved {} + timestamp {} + slot {} + counter {}; \
             epoch {} ms after 1970",
            self.bits,
            self.reserved_bits,
            self.timestamp_bits,
            self.slot_bits,
            self.counter_bits,
            self.epoch_unix_ms
        );
        leasehold_core::IdFormat::new(self.signature(), text)
            .unwrap_or_else(|e| unreachable!("a layout's format text is short ASCII: {e}"))
    }

    /// A signature of every field (FNV-1a), to tell layouts apart.
    pub(crate) fn signature(&self) -> u64 {
        let fields = [
            u64::from(self.bits),
            u64::from(self.reserved_bits),
            u64::from(self.timestamp_bits),
            u64::from(self.slot_bits),
            u64::from(self.counter_bits),
            self.epoch_unix_ms,
        ];
        fields
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .fold(0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
    }

    /// The largest timestamp field value.
    pub(crate) const fn max_millis(&self) -> u64 {
        if self.timestamp_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.timestamp_bits) - 1
        }
    }

    /// When the timestamp field runs out.
    pub fn overflows_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.epoch_unix_ms.saturating_add(self.max_millis()))
    }

    /// For a 64-bit layout, the time until which its plain IDs fit a signed
    /// 64-bit column (SQL `BIGINT`, `i64`): from then on the timestamp's top
    /// bit is the value's sign bit, and [`Nonce64::to_i64`] answers `None`.
    /// With a reserved bit every value fits, and this is [`overflows_at`]
    /// (generation stops there anyway). `None` for 96- and 128-bit layouts,
    /// which no `i64` holds (store them as bytes, or as a UUID).
    ///
    /// The default 64-bit layout (no reserved bit, 42 timestamp bits from
    /// 2025-01-01) fits until 2094-09-07T15:47:35.552Z, 2^41 ms after its
    /// epoch; [`Layout::snowflake`] keeps a reserved bit and always fits.
    /// Counter IDs never carry a later time than Sortable ones, so both fit
    /// until then. Encrypted IDs use all 64 bits at any time: about half
    /// never fit (bind `nonce.0 as i64`, which round-trips through
    /// `as u64` but does not keep the order, or use a `NUMERIC(20)` column).
    ///
    /// ```
    /// use leasehold_nonce::Layout;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// let until = Layout::default64().i64_until().unwrap();
    /// assert_eq!(until, UNIX_EPOCH + Duration::from_millis(3_934_712_855_552));
    /// let snowflake = Layout::snowflake();
    /// assert_eq!(snowflake.i64_until(), Some(snowflake.overflows_at()));
    /// assert_eq!(Layout::default128().i64_until(), None);
    /// ```
    ///
    /// [`overflows_at`]: Layout::overflows_at
    /// [`Nonce64::to_i64`]: crate::Nonce64::to_i64
    pub fn i64_until(&self) -> Option<SystemTime> {
        if self.bits != 64 {
            return None;
        }
        if self.reserved_bits > 0 {
            return Some(self.overflows_at());
        }
        // The timestamp is the top field: its top bit is the sign bit.
        let first_negative = 1u64 << (self.timestamp_bits - 1);
        Some(UNIX_EPOCH + Duration::from_millis(self.epoch_unix_ms.saturating_add(first_negative)))
    }

    /// A warning when the timestamp field runs out within a year of `now`.
    /// Check it at startup and log it.
    pub fn overflow_warning(&self, now: SystemTime) -> Option<OverflowWarning> {
        let at = self.overflows_at();
        (at <= now + YEAR).then_some(OverflowWarning {
            timestamp_bits: self.timestamp_bits,
            overflows_at: at,
        })
    }

    /// Puts the fields together. `millis`, `slot` and `counter` must fit.
    #[inline]
    pub(crate) fn compose(&self, millis: u64, slot: u64, counter: u128) -> u128 {
        (u128::from(millis) << (self.slot_bits + self.counter_bits))
            | (u128::from(slot) << self.counter_bits)
            | counter
    }

    /// Takes a (plain, not encrypted) nonce apart. Accepts any nonce type of
    /// this crate, or its `u128` value.
    ///
    /// ```
    /// use leasehold_nonce::{Layout, Nonce64};
    /// let l = Layout::default64();
    /// let parts = l.decode(Nonce64((1000 << 22) | (7 << 13) | 42));
    /// assert_eq!((parts.millis, parts.slot, parts.counter), (1000, 7, 42));
    /// ```
    pub fn decode(&self, nonce: impl Into<u128>) -> Parts {
        let (millis, slot, counter) = self.fields(nonce.into());
        let slot = slot as u32;
        Parts {
            time: UNIX_EPOCH + Duration::from_millis(self.epoch_unix_ms + millis),
            millis,
            slot,
            counter,
        }
    }
}

impl Layout {
    /// (timestamp, slot, counter) of a plain nonce: `compose` undone.
    #[inline]
    pub(crate) fn fields(&self, v: u128) -> (u64, u64, u128) {
        let counter = v & low_mask(self.counter_bits);
        let slot = ((v >> self.counter_bits) & low_mask(self.slot_bits)) as u64;
        let millis =
            ((v >> (self.counter_bits + self.slot_bits)) & low_mask(self.timestamp_bits)) as u64;
        (millis, slot, counter)
    }
}

pub(crate) const fn low_mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// Builds a custom [`Layout`]; `build` checks it.
#[derive(Clone, Debug)]
pub struct LayoutBuilder {
    bits: u32,
    reserved_bits: u32,
    timestamp_bits: u32,
    slot_bits: u32,
    counter_bits: Option<u32>,
    epoch_unix_ms: u64,
    pool_size: Option<u32>,
}

impl LayoutBuilder {
    /// Leading zero bits (1 for the Snowflake sign bit). Default 0.
    pub fn reserved_bits(mut self, bits: u32) -> Self {
        self.reserved_bits = bits;
        self
    }
    /// Timestamp bits. Default 42 (139 years of milliseconds).
    pub fn timestamp_bits(mut self, bits: u32) -> Self {
        self.timestamp_bits = bits;
        self
    }
    /// Slot bits. Default 9 (512 slots).
    pub fn slot_bits(mut self, bits: u32) -> Self {
        self.slot_bits = bits;
        self
    }
    /// Counter bits. Default: what the other fields leave.
    pub fn counter_bits(mut self, bits: u32) -> Self {
        self.counter_bits = Some(bits);
        self
    }
    /// The epoch. Default 2025-01-01T00:00:00Z. Must not be in the future.
    pub fn epoch(mut self, epoch: SystemTime) -> Self {
        self.epoch_unix_ms = epoch.duration_since(UNIX_EPOCH).map_or(u64::MAX, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        });
        self
    }
    /// The epoch in milliseconds since the UNIX epoch.
    pub fn epoch_unix_ms(mut self, ms: u64) -> Self {
        self.epoch_unix_ms = ms;
        self
    }
    /// The pool size the layout must hold: checked against the slot bits.
    pub fn pool_size(mut self, slots: u32) -> Self {
        self.pool_size = Some(slots);
        self
    }

    /// Checks and builds, against the current time.
    pub fn build(self) -> Result<Layout, LayoutError> {
        self.build_at(SystemTime::now())
    }

    /// Checks and builds, with `now` as the current time.
    pub fn build_at(self, now: SystemTime) -> Result<Layout, LayoutError> {
        if !matches!(self.bits, 64 | 96 | 128) {
            return Err(LayoutError::new("bits", self.bits, "64, 96 or 128"));
        }
        if self.reserved_bits > 8 {
            return Err(LayoutError::new(
                "reserved_bits",
                self.reserved_bits,
                "0 to 8",
            ));
        }
        if !(20..=52).contains(&self.timestamp_bits) {
            return Err(LayoutError::new(
                "timestamp_bits",
                self.timestamp_bits,
                "20 to 52 (milliseconds; 41 bits last 69 years, 42 bits 139 years)",
            ));
        }
        if self.slot_bits > 24 {
            return Err(LayoutError::new("slot_bits", self.slot_bits, "0 to 24"));
        }
        let used = self.reserved_bits + self.timestamp_bits + self.slot_bits;
        let counter_bits = match self.counter_bits {
            Some(c) => c,
            None => self.bits.saturating_sub(used),
        };
        if used + counter_bits != self.bits || counter_bits == 0 {
            let fit = self.bits.checked_sub(used).filter(|&c| c > 0);
            return Err(LayoutError::new(
                "counter_bits",
                counter_bits,
                match fit {
                    Some(c) => format!(
                        "the fields must add up to {} bits: reserved {} + timestamp {} + slot {} leave {c} counter bits",
                        self.bits, self.reserved_bits, self.timestamp_bits, self.slot_bits
                    ),
                    None => format!(
                        "the fields must add up to {} bits and leave at least 1 counter bit: \
                         reserved {} + timestamp {} + slot {} = {used}; shrink one of them",
                        self.bits, self.reserved_bits, self.timestamp_bits, self.slot_bits
                    ),
                },
            ));
        }
        if let Some(pool) = self.pool_size
            && u64::from(pool) > 1u64 << self.slot_bits
        {
            return Err(LayoutError::new(
                "slot_bits",
                self.slot_bits,
                format!(
                    "at least {} to hold a pool of {pool} slots (slot out of range)",
                    32 - (pool - 1).leading_zeros()
                ),
            ));
        }
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if self.epoch_unix_ms > now_ms {
            return Err(LayoutError::new(
                "epoch",
                format!("{} ms after the UNIX epoch", self.epoch_unix_ms),
                format!("a time not in the future (now is {now_ms} ms)"),
            ));
        }
        let layout = Layout {
            bits: self.bits,
            reserved_bits: self.reserved_bits,
            timestamp_bits: self.timestamp_bits,
            slot_bits: self.slot_bits,
            counter_bits,
            epoch_unix_ms: self.epoch_unix_ms,
        };
        if now_ms - self.epoch_unix_ms >= layout.max_millis() {
            return Err(LayoutError::new(
                "timestamp_bits",
                self.timestamp_bits,
                "more bits or a later epoch: the timestamp field has already overflowed",
            ));
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last millisecond before `i64_until` makes only values that fit a
    /// signed 64-bit column, whatever their slot and counter; its first
    /// millisecond makes none.
    #[test]
    fn i64_until_is_where_the_sign_bit_begins() {
        let l = Layout::default64();
        let until = l.i64_until().unwrap();
        let ms = until.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        assert_eq!(ms, 3_934_712_855_552, "2094-09-07T15:47:35.552Z");
        let low = l.slot_bits() + l.counter_bits();
        let field = ms - l.epoch_unix_ms();
        let last_fitting = crate::Nonce64(((field - 1) << low) | ((1 << low) - 1));
        assert!(last_fitting.to_i64().is_some());
        assert_eq!(l.decode(last_fitting).millis, field - 1);
        assert_eq!(crate::Nonce64(field << low).to_i64(), None);
        // A reserved bit keeps the sign bit clear for the layout's whole life.
        let reserved = Layout::builder(64)
            .reserved_bits(1)
            .timestamp_bits(41)
            .build()
            .unwrap();
        let largest = crate::Nonce64(u64::MAX >> 1);
        assert!(largest.to_i64().is_some());
        assert_eq!(reserved.i64_until(), Some(reserved.overflows_at()));
    }

    #[test]
    fn defaults_are_valid() {
        for bits in [64, 96, 128] {
            let l = Layout::default_for(bits).unwrap();
            assert_eq!(l.bits(), bits);
            assert_eq!(l.timestamp_bits() + l.slot_bits() + l.counter_bits(), bits);
        }
        assert_eq!(Layout::default_for(64).unwrap(), Layout::default64());
        assert_eq!(Layout::default_for(128).unwrap(), Layout::default128());
        let s = Layout::builder(64)
            .reserved_bits(1)
            .timestamp_bits(41)
            .slot_bits(10)
            .build()
            .unwrap();
        assert_eq!(s, Layout::snowflake());
    }

    #[test]
    fn errors_name_the_field() {
        let e = |b: LayoutBuilder| b.build().unwrap_err().field;
        assert_eq!(e(Layout::builder(65)), "bits");
        assert_eq!(e(Layout::builder(64).timestamp_bits(60)), "timestamp_bits");
        assert_eq!(e(Layout::builder(64).slot_bits(30)), "slot_bits");
        assert_eq!(e(Layout::builder(64).slot_bits(22)), "counter_bits");
        assert_eq!(e(Layout::builder(64).counter_bits(20)), "counter_bits");
        assert_eq!(
            e(Layout::builder(64).slot_bits(8).pool_size(512)),
            "slot_bits"
        );
        let future = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(e(Layout::builder(64).epoch(future)), "epoch");
        // 30 bits of milliseconds last 12 days: an epoch a month ago has overflowed.
        let month_ago = SystemTime::now() - Duration::from_secs(30 * 24 * 3600);
        let err = Layout::builder(64)
            .timestamp_bits(30)
            .epoch(month_ago)
            .build()
            .unwrap_err();
        assert_eq!(err.field, "timestamp_bits");
        assert!(err.to_string().contains("already overflowed"), "{err}");
    }

    #[test]
    fn warns_when_overflow_is_within_a_year() {
        let now = SystemTime::now();
        assert!(Layout::default64().overflow_warning(now).is_none());
        // 35 bits of milliseconds last ~398 days.
        let epoch = now - Duration::from_secs(100 * 24 * 3600);
        let l = Layout::builder(64)
            .timestamp_bits(35)
            .epoch(epoch)
            .build()
            .unwrap();
        let w = l.overflow_warning(now).unwrap();
        assert!(w.to_string().contains("within a year"), "{w}");
    }
}
