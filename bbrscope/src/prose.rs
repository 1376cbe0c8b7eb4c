//! Prose for a terminal: text broken at spaces to a width, the one way every report (the
//! experiment's, the demo's) wraps its sentences.

/// `text` broken at spaces into lines of at most `width` characters (a word longer than a line
/// stays whole): the first line keeps the text's own indentation, the others start with
/// `indent`. Runs of spaces between words become one.
pub(crate) fn wrap(text: &str, width: usize, indent: &str) -> Vec<String> {
    let lead = text.len() - text.trim_start_matches(' ').len();
    let mut lines = Vec::new();
    let mut line = text[..lead].to_string();
    let mut words = 0;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if words > 0 && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, indent.to_string()));
            words = 0;
        }
        if words > 0 {
            line.push(' ');
        }
        line.push_str(word);
        words += 1;
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn lines_break_at_spaces_within_the_width_and_continue_indented() {
        let long = "word ".repeat(60);
        let w = wrap(long.trim(), 100, "  ");
        assert!(w.len() >= 3, "{w:?}");
        assert!(w.iter().all(|l| l.chars().count() <= 100), "{w:?}");
        assert!(w.iter().skip(1).all(|l| l.starts_with("  word")), "{w:?}");
        assert_eq!(w.join(" ").split_whitespace().count(), 60, "every word kept");
    }

    #[test]
    fn the_first_line_keeps_its_indentation_and_a_long_word_stays_whole() {
        assert_eq!(wrap("  model for x: y", 100, "    "), ["  model for x: y"]);
        let w = wrap("a ünïcödé-wörd-longer-than-the-width b", 10, "    ");
        assert_eq!(w, ["a", "    ünïcödé-wörd-longer-than-the-width", "    b"]);
        assert_eq!(wrap("", 10, "  "), [""]);
    }
}
