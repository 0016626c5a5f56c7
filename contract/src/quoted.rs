//! Quoting what a plugin or a user wrote in a message, without letting its
//! length make the message long.

/// `text` cut to at most `max` bytes at a character boundary, marked when
/// cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
