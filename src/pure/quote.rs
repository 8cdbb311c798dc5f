//! Client input quoted in error messages: bounded, and with nothing that could forge a log line
//! or hide text on a terminal. A message may name what it refuses, never echo it whole.

/// Most characters of client input an error message quotes.
pub const MAX_QUOTED_CHARS: usize = 64;

/// `s` in double quotes, at most its first 64 characters, with control characters (and the
/// Unicode bidi and invisible format characters) escaped. A longer input ends with `…` and
/// gives its length: `"abcd…" (12000 characters)`.
pub fn quote_input(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_QUOTED_CHARS) + 2);
    out.push('"');
    let mut total = 0usize;
    for c in s.chars() {
        total += 1;
        if total <= MAX_QUOTED_CHARS {
            escape_into(c, &mut out);
        }
    }
    out.push('"');
    if total > MAX_QUOTED_CHARS {
        out.insert(out.len() - 1, '…');
        out.push_str(&format!(" ({total} characters)"));
    }
    out
}

/// A name taken from client input (an object key, a method, a tool name) inside a message: as it is when it is
/// short and plain, quoted with [`quote_input`] otherwise (and when empty, so it shows).
pub fn plain_or_quoted(s: &str) -> String {
    if !s.is_empty() && s.chars().count() <= MAX_QUOTED_CHARS && !s.chars().any(needs_escape) {
        s.to_string()
    } else {
        quote_input(s)
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || c == '"'
        || c == '\\'
        // Bidi embeddings, overrides and isolates, zero-width characters, the BOM.
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

fn escape_into(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if needs_escape(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_quoted_whole() {
        assert_eq!(quote_input("abc"), "\"abc\"");
        assert_eq!(quote_input(""), "\"\"");
        assert_eq!(quote_input(&"x".repeat(64)), format!("\"{}\"", "x".repeat(64)));
    }

    #[test]
    fn long_input_is_cut_with_its_length() {
        let q = quote_input(&"a".repeat(12000));
        assert_eq!(q, format!("\"{}…\" (12000 characters)", "a".repeat(64)));
        // Characters, not bytes: 65 two-byte characters.
        assert_eq!(quote_input(&"é".repeat(65)), format!("\"{}…\" (65 characters)", "é".repeat(64)));
    }

    #[test]
    fn control_and_invisible_characters_are_escaped() {
        assert_eq!(quote_input("a\nb\r\tc"), "\"a\\nb\\r\\tc\"");
        assert_eq!(quote_input("x\u{0}y\u{1b}[31m"), "\"x\\u{0000}y\\u{001b}[31m\"");
        assert_eq!(quote_input("say \"hi\" \\"), "\"say \\\"hi\\\" \\\\\"");
        assert_eq!(quote_input("a\u{202E}b\u{200B}"), "\"a\\u{202e}b\\u{200b}\"");
        assert_eq!(quote_input("\u{85}"), "\"\\u{0085}\"");
        // No raw control character survives, however long the input.
        let q = quote_input(&"\n".repeat(1000));
        assert!(!q.chars().any(char::is_control));
        assert!(q.ends_with("(1000 characters)"));
    }

    #[test]
    fn field_names_stay_plain_when_they_can() {
        assert_eq!(plain_or_quoted("X-Api-Key"), "X-Api-Key");
        assert_eq!(plain_or_quoted("bad\nname"), "\"bad\\nname\"");
        assert_eq!(plain_or_quoted(&"k".repeat(100)), format!("\"{}…\" (100 characters)", "k".repeat(64)));
    }

    #[test]
    fn each_unusual_character_alone_makes_a_name_quoted() {
        for s in ["a\"b", "a\\b", "a\nb", "a\u{202E}b", "a\u{FEFF}b"] {
            assert!(plain_or_quoted(s).starts_with('"'), "{s:?}");
        }
        assert_eq!(plain_or_quoted("plain-name_1.0"), "plain-name_1.0");
    }

    /// An empty key shown as is leaves nothing to read ("…; : is not a server field"); found by
    /// the console_bodies fuzz target.
    #[test]
    fn an_empty_name_is_quoted() {
        assert_eq!(plain_or_quoted(""), "\"\"");
    }
}
