//! Just enough JSON to read cargo's `--message-format=json` lines: one value
//! per line, parsed whole (no dependency for it; the workspace's JSON crate
//! would join xtask's build with features of its own).

/// A JSON value. Numbers are kept as their text: nothing here computes with
/// them.
#[derive(Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The value of one line of text, or `None` if it is not JSON.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut p = Parser {
            bytes: text.as_bytes(),
            at: 0,
        };
        let value = p.value()?;
        p.space();
        (p.at == p.bytes.len()).then_some(value)
    }

    /// The member `key` of an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Self> {
        match self {
            Self::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> &[Self] {
        match self {
            Self::Array(items) => items,
            _ => &[],
        }
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.space();
        let here = self.bytes.get(self.at) == Some(&b);
        if here {
            self.at += 1;
        }
        here
    }

    fn word(&mut self, word: &str, value: Json) -> Option<Json> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word.as_bytes()).then(|| {
            self.at = end;
            value
        })
    }

    fn value(&mut self) -> Option<Json> {
        self.space();
        match *self.bytes.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                if !self.eat(b'}') {
                    loop {
                        self.space();
                        let key = self.string()?;
                        if !self.eat(b':') {
                            return None;
                        }
                        members.push((key, self.value()?));
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some(Json::Object(members))
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.value()?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some(Json::Array(items))
            }
            b'"' => self.string().map(Json::String),
            b't' => self.word("true", Json::Bool(true)),
            b'f' => self.word("false", Json::Bool(false)),
            b'n' => self.word("null", Json::Null),
            _ => {
                let start = self.at;
                while self
                    .bytes
                    .get(self.at)
                    .is_some_and(|b| b.is_ascii_digit() || b"+-.eE".contains(b))
                {
                    self.at += 1;
                }
                (self.at > start).then(|| {
                    Json::Number(String::from_utf8_lossy(&self.bytes[start..self.at]).into())
                })
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            match b {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.bytes.get(self.at)?;
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let high = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&high) {
                                // A surrogate pair: `\uD83D\uDE00`.
                                if self.bytes.get(self.at..self.at + 2)? != b"\\u" {
                                    return None;
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                0x10000 + ((high - 0xD800) << 10) + (low.checked_sub(0xDC00)?)
                            } else {
                                high
                            };
                            char::from_u32(code)?
                        }
                        _ => return None,
                    };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                _ => out.push(b),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let text = std::str::from_utf8(self.bytes.get(self.at..self.at + 4)?).ok()?;
        self.at += 4;
        u32::from_str_radix(text, 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::Json;

    #[test]
    fn a_cargo_artifact_line_is_read_whole() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/campaign#leasehold-campaign@0.3.0","manifest_path":"/w/campaign/Cargo.toml","target":{"kind":["test"],"name":"fenced_key","doc":false,"test":true},"profile":{"opt_level":"0","test":false},"features":[],"filenames":["/w/target/debug/deps/fenced_key-1"],"executable":"/w/target/debug/deps/fenced_key-1","fresh":true}"#;
        let v = Json::parse(line).expect("parses");
        assert_eq!(
            v.get("reason").and_then(Json::as_str),
            Some("compiler-artifact")
        );
        let target = v.get("target").expect("target");
        assert_eq!(
            target.get("kind"),
            Some(&Json::Array(vec![Json::String("test".into())]))
        );
        // The target's `test` and the profile's are told apart.
        assert_eq!(target.get("test").and_then(Json::as_bool), Some(true));
        let profile = v.get("profile").expect("profile");
        assert_eq!(profile.get("test").and_then(Json::as_bool), Some(false));
        assert_eq!(
            v.get("executable").and_then(Json::as_str),
            Some("/w/target/debug/deps/fenced_key-1")
        );
    }

    #[test]
    fn escapes_numbers_and_nulls_are_read() {
        let v = Json::parse(
            r#" {"a":"q\"\\\/\n\u00e9\ud83d\ude00","b":[1,-2.5e3,null,false],"c":{}} "#,
        )
        .expect("parses");
        assert_eq!(v.get("a").and_then(Json::as_str), Some("q\"\\/\né😀"));
        assert_eq!(
            v.get("b"),
            Some(&Json::Array(vec![
                Json::Number("1".into()),
                Json::Number("-2.5e3".into()),
                Json::Null,
                Json::Bool(false)
            ]))
        );
        assert_eq!(v.get("c"), Some(&Json::Object(Vec::new())));
        assert_eq!(Json::parse("{\"a\":1"), None);
        assert_eq!(Json::parse("   Compiling foo v1.0"), None);
        assert_eq!(Json::parse("[1] 2"), None);
    }
}
