//! Turning command-line text into frames and received frames into one printable line.

use std::fmt::Write as _;

use bytes::Bytes;
use zmtp::Message;

/// How received messages are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Text frames as text; frames with other bytes (or the delimiter) as 0x<hex>.
    Auto,
    /// Every frame as text; control and invalid bytes escaped as \xNN.
    Text,
    /// Every frame as lowercase hex (no 0x), the form --hex reads back.
    Hex,
    /// One JSON array per message: a string per UTF-8 frame, {"hex": "…"} for any other frame.
    Json,
}

/// How MESSAGE arguments and stdin lines become frames.
#[derive(Clone, Debug)]
pub struct Framing {
    /// Separates frames within one message.
    pub delimiter: String,
    /// Frames are written in hex.
    pub hex: bool,
    /// ROUTER: the first frame is a routing id (text, or 0x<hex>) and a body must follow.
    pub router: bool,
    /// The draft types: a message is one frame, the delimiter is part of it.
    pub single: bool,
}

/// Parses one message: `a|b|c` → three frames (`|` being the delimiter).
pub fn parse_message(raw: &[u8], framing: &Framing) -> Result<Message, String> {
    let mut msg = Message::new();
    let parts = if framing.single { vec![raw] } else { split(raw, framing.delimiter.as_bytes()) };
    for (i, part) in parts.into_iter().enumerate() {
        let frame = if framing.hex {
            decode_hex(part)?
        } else if framing.router && i == 0 {
            parse_id(part)?.to_vec()
        } else {
            part.to_vec()
        };
        msg.push(frame);
    }
    if framing.router && msg.len() < 2 {
        return Err(format!(
            "a ROUTER message starts with the routing id of its receiver: write ID{}BODY",
            framing.delimiter
        ));
    }
    Ok(msg)
}

/// A routing id: text, or `0x` followed by hex digits for binary ids (as printed on receipt).
pub fn parse_id(raw: &[u8]) -> Result<Bytes, String> {
    let id = match raw.strip_prefix(b"0x") {
        Some(hex) => decode_hex(hex)?,
        None => raw.to_vec(),
    };
    if id.len() > 255 {
        return Err(format!("routing id is {} bytes long; ZeroMQ allows at most 255", id.len()));
    }
    Ok(Bytes::from(id))
}

/// Hex digits (an optional `0x` prefix, any case) to bytes.
pub fn decode_hex(raw: &[u8]) -> Result<Vec<u8>, String> {
    let digits = raw.strip_prefix(b"0x").unwrap_or(raw);
    let bad = || format!("{:?} is not valid hex (expected pairs of 0-9a-f digits)", String::from_utf8_lossy(raw));
    if !digits.len().is_multiple_of(2) {
        return Err(bad());
    }
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).map_err(|_| bad())?;
            u8::from_str_radix(text, 16).map_err(|_| bad())
        })
        .collect()
}

fn split<'a>(raw: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut parts = Vec::new();
    let mut rest = raw;
    while let Some(at) = rest.windows(delimiter.len()).position(|w| w == delimiter) {
        parts.push(&rest[..at]);
        rest = &rest[at + delimiter.len()..];
    }
    parts.push(rest);
    parts
}

/// One line for a received message (without the newline).
/// One line for a message. An empty `delimiter` says the message is one frame whatever it holds
/// (the draft types), so a `|` in it is printed as it is.
pub fn format_message(msg: &Message, format: Format, delimiter: &str, xpub: bool) -> String {
    if format == Format::Json {
        return json_message(msg);
    }
    let mut line = String::new();
    for (i, frame) in msg.iter().enumerate() {
        if i > 0 {
            line.push_str(delimiter);
        }
        match format {
            Format::Hex => push_hex(&mut line, frame),
            Format::Text => push_escaped(&mut line, frame),
            Format::Auto if xpub && i == 0 && msg.len() == 1 && is_subscription(frame, delimiter) => {
                // XPUB receives subscriptions as \x01topic (subscribe) and \x00topic (unsubscribe).
                push_escaped(&mut line, frame)
            }
            Format::Auto | Format::Json => match as_text(frame, delimiter) {
                Some(text) => line.push_str(text),
                None => {
                    line.push_str("0x");
                    push_hex(&mut line, frame);
                }
            },
        }
    }
    line
}

fn is_subscription(frame: &[u8], delimiter: &str) -> bool {
    matches!(frame.first(), Some(0 | 1)) && as_text(&frame[1..], delimiter).is_some()
}

/// The frame as text if it is UTF-8 without control characters or the delimiter.
/// A frame that prints as itself: UTF-8 without control characters or (for a message that has
/// frames to separate) the delimiter.
fn as_text<'a>(frame: &'a [u8], delimiter: &str) -> Option<&'a str> {
    let text = std::str::from_utf8(frame).ok()?;
    (!text.chars().any(char::is_control) && (delimiter.is_empty() || !text.contains(delimiter))).then_some(text)
}

fn push_hex(line: &mut String, frame: &[u8]) {
    for b in frame {
        let _ = write!(line, "{b:02x}");
    }
}

fn push_escaped(line: &mut String, frame: &[u8]) {
    for chunk in frame.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => line.push_str("\\\\"),
                c if c.is_control() && (c as u32) < 0x100 => {
                    let _ = write!(line, "\\x{:02x}", c as u32);
                }
                c => line.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(line, "\\x{b:02x}");
        }
    }
}

fn json_message(msg: &Message) -> String {
    let mut out = String::from("[");
    for (i, frame) in msg.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match std::str::from_utf8(frame) {
            Ok(text) => push_json_string(&mut out, text),
            Err(_) => {
                out.push_str("{\"hex\":\"");
                push_hex(&mut out, frame);
                out.push_str("\"}");
            }
        }
    }
    out.push(']');
    out
}

fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing(hex: bool, router: bool) -> Framing {
        Framing { delimiter: "|".into(), hex, router, single: false }
    }

    #[test]
    fn a_draft_type_message_is_one_frame_whatever_it_holds() {
        let single = Framing { single: true, ..framing(false, false) };
        assert_eq!(parse_message(b"a|b", &single).unwrap(), Message::from("a|b"));
        let hex = Framing { single: true, ..framing(true, false) };
        assert_eq!(parse_message(b"6869", &hex).unwrap(), Message::from("hi"));
    }

    #[test]
    fn splits_frames_on_the_delimiter() {
        let m = parse_message(b"topic|body||end", &framing(false, false)).unwrap();
        assert_eq!(m, Message::from(vec!["topic", "body", "", "end"]));
        let m = parse_message(b"", &framing(false, false)).unwrap();
        assert_eq!(m, Message::from(vec![""]));
        let multi = Framing { delimiter: "::".into(), hex: false, router: false, single: false };
        assert_eq!(parse_message(b"a::b:c", &multi).unwrap(), Message::from(vec!["a", "b:c"]));
    }

    #[test]
    fn hex_frames_and_router_ids() {
        let m = parse_message(b"0x00ff|6869", &framing(true, false)).unwrap();
        assert_eq!(m, Message::from(vec![Bytes::from_static(&[0, 255]), Bytes::from_static(b"hi")]));
        assert!(parse_message(b"abc", &framing(true, false)).unwrap_err().contains("not valid hex"));
        assert!(parse_message(b"zz", &framing(true, false)).is_err());
        let m = parse_message(b"0x0080000001|hello", &framing(false, true)).unwrap();
        assert_eq!(m[0], Bytes::from_static(&[0, 0x80, 0, 0, 1]));
        assert_eq!(parse_message(b"worker|job", &framing(false, true)).unwrap()[0], "worker");
        assert!(parse_message(b"just-a-body", &framing(false, true)).unwrap_err().contains("routing id"));
        assert!(parse_id(&[b'x'; 256]).is_err());
    }

    #[test]
    fn auto_format_prints_text_or_hex() {
        let m = Message::from(vec![Bytes::from_static(&[0, 0x80, 0, 0, 1]), Bytes::new(), Bytes::from("hi")]);
        assert_eq!(format_message(&m, Format::Auto, "|", false), "0x0080000001||hi");
        assert_eq!(format_message(&Message::from(vec!["a|b"]), Format::Auto, "|", false), "0x617c62");
        assert_eq!(format_message(&Message::from(vec!["é", "x"]), Format::Auto, " ", false), "é x");
        assert_eq!(format_message(&m, Format::Hex, "|", false), "0080000001||6869");
    }

    #[test]
    fn xpub_subscriptions_and_text_escapes() {
        let sub = Message::from(vec![Bytes::from_static(b"\x01weather")]);
        assert_eq!(format_message(&sub, Format::Auto, "|", true), "\\x01weather");
        assert_eq!(format_message(&sub, Format::Auto, "|", false), "0x0177656174686572");
        let odd = Message::from(vec![Bytes::from_static(b"a\\b\n\xff")]);
        assert_eq!(format_message(&odd, Format::Text, "|", false), "a\\\\b\\x0a\\xff");
    }

    #[test]
    fn json_format() {
        let m = Message::from(vec![Bytes::from("say \"hi\"\n"), Bytes::from_static(&[0xff, 0])]);
        assert_eq!(format_message(&m, Format::Json, "|", false), r#"["say \"hi\"\n",{"hex":"ff00"}]"#);
    }
}
