//! Keeping passwords in URLs out of every line the tool prints.

pub(crate) use leasehold::url::masked as url;

/// The password of `url` as written and percent-decoded: the strings no
/// output may contain.
pub(crate) fn secrets(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return Vec::new();
    };
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return Vec::new();
    };
    let Some((_, password)) = userinfo.split_once(':') else {
        return Vec::new();
    };
    if password.is_empty() {
        return Vec::new();
    }
    let mut out = vec![password.to_owned()];
    let decoded = leasehold::url::percent_decode(password);
    if decoded != password {
        out.push(decoded);
    }
    out
}

/// `text` with every secret replaced by `***`: always where it stands in a
/// URL (`:secret@`), and anywhere when it is long enough (4 characters or
/// more) not to garble the text by matching ordinary letters.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for s in secrets {
        text = text.replace(&format!(":{s}@"), ":***@");
        if s.chars().count() >= 4 {
            text = text.replace(s.as_str(), "***");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_replaced() {
        assert_eq!(
            url("postgres://u:s3cret@h:5/db?sslmode=require"),
            "postgres://u:***@h:5/db?sslmode=require"
        );
        assert_eq!(url("redis://h:6379"), "redis://h:6379");
        assert_eq!(url("mysql://root@h/x"), "mysql://root@h/x");
        assert_eq!(secrets("postgres://u:p%40ss@h/db"), vec!["p%40ss", "p@ss"]);
        assert!(secrets("sqlite://./x.db").is_empty());
        assert_eq!(
            scrub("bad p@ss here", &secrets("x://u:p%40ss@h")),
            "bad *** here"
        );
    }
}
