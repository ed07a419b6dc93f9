//! Keeping secrets in URLs out of every line the tool prints: the URL is
//! shown through the one redaction (`leasehold::url::redacted`), and any
//! other text (a driver's error message) is scrubbed of the URL's secrets
//! (`leasehold::url::secrets`) before it is printed.

pub(crate) use leasehold::url::redacted as url;
pub(crate) use leasehold::url::secrets;

/// `text` with every secret replaced by `***`: always where it stands in a
/// URL (`:secret@`, `=secret`), and anywhere when it is long enough (4
/// characters or more) not to garble the text by matching ordinary letters.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for s in secrets {
        text = text.replace(&format!(":{s}@"), ":***@");
        text = text.replace(&format!("={s}"), "=***");
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
            url("postgres://u:s3cret@h:5/db?sslmode=require&password=s3cret"),
            "postgres://u:***@h:5/db?sslmode=require&password=***"
        );
        assert_eq!(url("redis://h:6379"), "redis://h:6379");
        assert_eq!(url("mysql://root@h/x"), "mysql://root@h/x");
        assert_eq!(secrets("postgres://u:p%40ss@h/db"), vec!["p%40ss", "p@ss"]);
        assert!(secrets("sqlite://./x.db").is_empty());
        assert_eq!(
            scrub("bad p@ss here", &secrets("x://u:p%40ss@h")),
            "bad *** here"
        );
        assert_eq!(
            scrub("token=ab1 and ab1", &secrets("x://h?token=ab1")),
            "token=*** and ab1"
        );
    }
}
