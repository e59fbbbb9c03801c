//! Shared: split fuzz input into a multipart message (u8 length prefix per frame).
use zmtp::Message;

pub fn message(mut data: &[u8]) -> Message {
    let mut msg = Message::new();
    while let Some((&len, rest)) = data.split_first() {
        let len = (len as usize).min(rest.len());
        msg.push(rest[..len].to_vec());
        data = &rest[len..];
    }
    msg
}
