//! `leasehold decode`: IDs taken apart with leasehold-nonce's layouts.

use std::io::BufRead;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold::LeaseGate;
use leasehold::nonce::{
    BaseKey, Counter64, Counter96, Counter128, Encrypted, Layout, Nonce64, Nonce96, Nonce128, Uuid7,
};

use crate::error::{CliError, Exit};

/// The layouts leasehold-nonce names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LayoutName {
    /// 64 bits: 42 timestamp, 9 slot, 13 counter.
    Default64,
    /// 96 bits: 42 timestamp, 9 slot, 45 counter.
    Default96,
    /// 128 bits: 42 timestamp, 9 slot, 77 counter (also UUIDv7).
    Default128,
    /// 64 bits: 1 reserved, 41 timestamp, 10 slot, 12 counter.
    Snowflake,
}

impl LayoutName {
    fn layout(self) -> Layout {
        match self {
            Self::Default64 => Layout::default64(),
            Self::Default96 => Layout::default96(),
            Self::Default128 => Layout::default128(),
            Self::Snowflake => Layout::snowflake(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Default64 => "default64",
            Self::Default96 => "default96",
            Self::Default128 => "default128",
            Self::Snowflake => "snowflake",
        }
    }

    fn for_bits(bits: u32) -> Self {
        match bits {
            64 => Self::Default64,
            96 => Self::Default96,
            _ => Self::Default128,
        }
    }
}

/// How an ID of decimal digits only is read: a 16, 24 or 32-digit one is
/// valid both as the hex that a nonce's `Display` prints and, when it fits
/// a u64, as a decimal number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Digits {
    /// As hex digits (`--hex`).
    Hex,
    /// As a decimal number (`--decimal`).
    Decimal,
}

/// What an ID's text was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Decimal,
    Hex,
    Base32,
    Uuid,
}

/// A parsed ID: its value, its width (from its form) and its form.
struct Parsed {
    value: u128,
    bits: u32,
    form: Form,
}

/// An ID's reading, or both readings of an ID of digits only.
enum Reading {
    One(Parsed),
    Ambiguous { hex: Parsed, decimal: Parsed },
}

/// Hex digits (no `0x`) as an ID whose width follows from how many there are.
fn parse_hex(hex: &str) -> Result<Parsed, String> {
    let hex = hex.replace('_', "");
    if hex.is_empty() || hex.len() > 32 {
        return Err("hex needs 1 to 32 hex digits".into());
    }
    let value = u128::from_str_radix(&hex, 16)
        .map_err(|_| "a character that is not a hex digit".to_owned())?;
    let bits = match hex.len() {
        0..=16 => 64,
        17..=24 => 96,
        _ => 128,
    };
    Ok(Parsed {
        value,
        bits,
        form: Form::Hex,
    })
}

fn parse_decimal(t: &str) -> Result<Parsed, String> {
    let value: u64 = t.parse().map_err(|_| {
        "a decimal number larger than a u64; give wider IDs in hex (0x…) or base32".to_owned()
    })?;
    Ok(Parsed {
        value: u128::from(value),
        bits: 64,
        form: Form::Decimal,
    })
}

/// Reads `text`. An ID of decimal digits only is read as `digits` says;
/// without it, as the one form it is valid in, or both readings when it is
/// valid as hex (16, 24 or 32 digits, as `Display` prints nonces) and as a
/// decimal u64.
fn parse(text: &str, digits: Option<Digits>) -> Result<Reading, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match digits {
            Some(Digits::Hex) => parse_hex(t).map(Reading::One),
            Some(Digits::Decimal) => parse_decimal(t).map(Reading::One),
            None => {
                let hex = matches!(t.len(), 16 | 24 | 32)
                    .then(|| parse_hex(t))
                    .transpose()?;
                match (hex, parse_decimal(t)) {
                    (Some(hex), Ok(decimal)) => Ok(Reading::Ambiguous { hex, decimal }),
                    (Some(hex), Err(_)) => Ok(Reading::One(hex)),
                    (None, decimal) => decimal.map(Reading::One),
                }
            }
        };
    }
    if digits == Some(Digits::Decimal) {
        return Err("not a decimal number, as --decimal says it is".into());
    }
    parse_other(t).map(Reading::One)
}

/// Reads an ID that is not all decimal digits.
fn parse_other(t: &str) -> Result<Parsed, String> {
    if t.len() == 36 && t.contains('-') {
        let u: Uuid7 = t.parse().map_err(|e| format!("{e}"))?;
        return Ok(Parsed {
            value: u.to_u128(),
            bits: 128,
            form: Form::Uuid,
        });
    }
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return parse_hex(hex).map_err(|e| format!("0x-{e}"));
    }
    let form = |hex_len: usize| {
        if t.len() == hex_len {
            Form::Hex
        } else {
            Form::Base32
        }
    };
    let parsed = match t.len() {
        13 | 16 => t
            .parse::<Nonce64>()
            .map(|n| (u128::from(n.0), 64, form(16))),
        20 | 24 => t.parse::<Nonce96>().map(|n| (u128::from(n), 96, form(24))),
        26 | 32 => t.parse::<Nonce128>().map(|n| (n.0, 128, form(32))),
        _ => {
            return Err(
                "not an ID: give a u64, 0x-hex, 16/24/32 hex digits, 13/20/26 Crockford base32 \
                 characters or a UUIDv7"
                    .into(),
            );
        }
    };
    let (value, bits, form) = parsed.map_err(|e| e.to_string())?;
    Ok(Parsed { value, bits, form })
}

/// The plain value of an encrypted nonce: the same cipher and key
/// derivation as `Encrypted` (a generator on a closed, private gate never
/// generates; it only carries the width and layout).
fn decrypt(key: &BaseKey, layout: Layout, value: u128) -> Result<u128, String> {
    let built = |e: leasehold::nonce::BuildError| e.to_string();
    Ok(match layout.bits() {
        64 => {
            let ids = Encrypted::new(
                Counter64::with_layout(LeaseGate::new(), layout).map_err(built)?,
                key,
            );
            u128::from(ids.decrypt(Nonce64(value as u64)).0)
        }
        96 => {
            let ids = Encrypted::new(
                Counter96::with_layout(LeaseGate::new(), layout).map_err(built)?,
                key,
            );
            let n = Nonce96::new(value).ok_or("wider than 96 bits")?;
            u128::from(ids.decrypt(n))
        }
        _ => {
            let ids = Encrypted::new(
                Counter128::with_layout(LeaseGate::new(), layout).map_err(built)?,
                key,
            );
            ids.decrypt(Nonce128(value)).0
        }
    })
}

fn describe_layout(name: LayoutName) -> String {
    let l = name.layout();
    let reserved = if l.reserved_bits() > 0 {
        format!("{} reserved, ", l.reserved_bits())
    } else {
        String::new()
    };
    format!(
        "{} ({} bits: {reserved}{} timestamp, {} slot, {} counter; epoch {})",
        name.name(),
        l.bits(),
        l.timestamp_bits(),
        l.slot_bits(),
        l.counter_bits(),
        crate::table::unix_ms(l.epoch_unix_ms())
    )
}

fn times(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let Ok(ts) = jiff::Timestamp::from_millisecond(ms) else {
        return format!("{ms} ms after the Unix epoch");
    };
    let zone = jiff::tz::TimeZone::system();
    let local = ts.to_zoned(zone.clone());
    let name = zone.iana_name().unwrap_or("local time");
    format!(
        "{ts:.3} (UTC), {} ({name})",
        local.strftime("%Y-%m-%d %H:%M:%S%.3f %:z")
    )
}

fn decode_one(
    text: &str,
    layout: Option<LayoutName>,
    key: Option<&BaseKey>,
    digits: Option<Digits>,
) -> Result<String, String> {
    match parse(text, digits)? {
        Reading::One(p) => render(text, &p, layout, key),
        Reading::Ambiguous { hex, decimal } => {
            let reading = |p: &Parsed| {
                render(text, p, layout, key).unwrap_or_else(|e| format!("  (cannot: {e})\n"))
            };
            Err(format!(
                "ambiguous: {} decimal digits are valid both as hex (as a nonce's Display \
                 prints it) and as a decimal number; give --hex or --decimal. The two \
                 readings:\n{}{}",
                text.trim().len(),
                reading(&hex),
                reading(&decimal)
            ))
        }
    }
}

/// The lines that take the ID `p` (read from `text`) apart.
fn render(
    text: &str,
    p: &Parsed,
    layout: Option<LayoutName>,
    key: Option<&BaseKey>,
) -> Result<String, String> {
    let name = layout.unwrap_or(LayoutName::for_bits(p.bits));
    let l = name.layout();
    if l.bits() < 128 && p.value >> l.bits() != 0 {
        return Err(format!(
            "wider than the {} layout's {} bits",
            name.name(),
            l.bits()
        ));
    }
    let form = match p.form {
        Form::Decimal => "decimal",
        Form::Hex => "hex",
        Form::Base32 => "base32",
        Form::Uuid => "UUIDv7",
    };
    let mut out = format!("{} ({form})\n", text.trim());
    out.push_str(&format!("  layout   {}\n", describe_layout(name)));
    let parts = if p.form == Form::Uuid {
        if l.bits() != 128 {
            return Err(format!(
                "a UUIDv7 carries a 128-bit nonce, not the {} layout",
                name.name()
            ));
        }
        if key.is_some() {
            out.push_str("  note     UUIDv7 forms are never encrypted: --key-file ignored\n");
        }
        let u = Uuid7::from_bytes(p.value.to_be_bytes()).ok_or("not a UUIDv7")?;
        l.decode(u.to_nonce(&l))
    } else {
        let plain = match key {
            Some(k) => {
                let plain = decrypt(k, l, p.value)?;
                out.push_str(&format!(
                    "  plain    0x{plain:0w$x} (decrypted)\n",
                    w = l.bits() as usize / 4
                ));
                plain
            }
            None => p.value,
        };
        if l.reserved_bits() > 0 && plain >> (l.bits() - l.reserved_bits()) != 0 {
            out.push_str("  warning  the reserved bits are not zero: wrong layout or key?\n");
        }
        l.decode(plain)
    };
    out.push_str(&format!("  time     {}\n", times(parts.time)));
    out.push_str(&format!("  slot     {}\n", parts.slot));
    out.push_str(&format!("  counter  {}\n", parts.counter));
    let day = std::time::Duration::from_secs(86_400);
    if parts.time > SystemTime::now() + day {
        out.push_str("  warning  this time is in the future: wrong layout or key?\n");
    }
    Ok(out)
}

pub(crate) fn decode(
    ids: Vec<String>,
    layout: Option<LayoutName>,
    key_file: Option<&Path>,
    digits: Option<Digits>,
) -> Result<Exit, CliError> {
    let key = match key_file {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| {
                CliError::new(
                    Exit::BadInput,
                    format!("cannot read the key file {}: {e}", path.display()),
                )
            })?;
            Some(BaseKey::new(&bytes).map_err(|e| {
                CliError::new(Exit::BadInput, format!("key file {}: {e}", path.display()))
            })?)
        }
        None => None,
    };
    let ids = if ids.is_empty() {
        std::io::stdin()
            .lock()
            .lines()
            .map_while(Result::ok)
            .filter(|l| !l.trim().is_empty())
            .collect()
    } else {
        ids
    };
    let mut failed = 0usize;
    let mut first = true;
    for id in &ids {
        match decode_one(id, layout, key.as_ref(), digits) {
            Ok(text) => {
                if !first {
                    println!();
                }
                first = false;
                print!("{text}");
            }
            Err(e) => {
                failed += 1;
                eprintln!("leasehold: cannot decode {:?}: {e}", id.trim());
            }
        }
    }
    if failed > 0 {
        return Err(CliError::new(
            Exit::BadInput,
            format!("{failed} of {} IDs could not be decoded", ids.len()),
        ));
    }
    Ok(Exit::Ok)
}
