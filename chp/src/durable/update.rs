//! One log record: an update as published, with its deadline on the wall clock.
//!
//! Payload, integers little-endian:
//!
//! | Bytes | Field |
//! |---|---|
//! | 1 | kind = 1 (update) |
//! | 8 | sequence |
//! | 8 | deadline, Unix milliseconds (0 = no ttl) |
//! | 1 + 0 or 16 | UUID length, UUID |
//! | 2 + n | key length, key |
//! | 4 + n | properties length, properties frame (`name=value\n` lines) |
//! | rest | value (empty = delete) |

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::fields::{Fields, kind};
use super::record::push_record;
use super::{Corruption, JournalError};
use crate::kvmsg::{self, KvMsg, Properties};

/// An update to journal: the KVPUB as published (sequence, key, UUID, properties, value; an
/// empty value deletes) and the key's deadline.
///
/// The deadline is absolute wall-clock time, not the `ttl` property: the property is relative
/// to when the update arrived, which a restart forgets. See [`unix_millis`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// The update, with the sequence it was published with.
    pub msg: KvMsg,
    /// When the key expires, in Unix milliseconds (`None`: no ttl; 0 is read back as `None`).
    pub deadline: Option<u64>,
}

/// `time` as Unix milliseconds, the journal's unit for deadlines (0 before 1970).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// assert_eq!(chp::durable::unix_millis(UNIX_EPOCH + Duration::from_millis(1500)), 1500);
/// ```
pub fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Update {
    /// Appends this update's record to `out`; refuses what [`decode`](Self::decode) would refuse.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), JournalError> {
        let msg = &self.msg;
        kvmsg::check_key(&msg.key).map_err(|e| JournalError::Unwritable(Corruption::InvalidField(e)))?;
        let properties = msg.properties.encode();
        push_record(out, |p| {
            p.push(kind::UPDATE);
            p.extend_from_slice(&msg.sequence.to_le_bytes());
            p.extend_from_slice(&self.deadline.unwrap_or(0).to_le_bytes());
            match msg.uuid {
                Some(uuid) => {
                    p.push(16);
                    p.extend_from_slice(uuid.as_bytes());
                }
                None => p.push(0),
            }
            p.extend_from_slice(&(msg.key.len() as u16).to_le_bytes());
            p.extend_from_slice(&msg.key);
            // Saturating: a frame over 4 GiB makes the record too long, refused below.
            p.extend_from_slice(&u32::try_from(properties.len()).unwrap_or(u32::MAX).to_le_bytes());
            p.extend_from_slice(properties.as_bytes());
            p.extend_from_slice(&msg.body);
        })
        .map_err(|len| JournalError::Unwritable(Corruption::TooLong(len)))
    }

    /// Reads an update record's payload.
    pub(crate) fn decode(payload: &[u8]) -> Result<Update, Corruption> {
        let mut fields = Fields::new(payload);
        let tag = fields.u8()?;
        if tag != kind::UPDATE {
            return Err(Corruption::UnexpectedKind(tag));
        }
        let sequence = fields.u64()?;
        let deadline = fields.u64()?;
        let uuid_len = fields.u8()?;
        let uuid = kvmsg::parse_uuid(fields.bytes(usize::from(uuid_len))?).map_err(Corruption::InvalidField)?;
        let key_len = fields.u16()?;
        let key = fields.bytes(usize::from(key_len))?;
        kvmsg::check_key(key).map_err(Corruption::InvalidField)?;
        let properties_len = fields.u32()?;
        let properties = fields.bytes(properties_len as usize)?;
        let properties = Properties::parse(properties).map_err(Corruption::InvalidField)?;
        let body = fields.rest();
        Ok(Update {
            msg: KvMsg {
                key: Bytes::copy_from_slice(key),
                sequence,
                uuid,
                properties,
                body: Bytes::copy_from_slice(body),
            },
            deadline: (deadline != 0).then_some(deadline),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::record::{HEADER_LEN, MAX_RECORD_LEN};
    use crate::uuid::Uuid;

    fn decoded(record: &[u8]) -> Result<Update, Corruption> {
        Update::decode(&record[HEADER_LEN..])
    }

    #[test]
    fn every_field_round_trips() {
        let mut msg = KvMsg::new("/a/b", "value");
        msg.sequence = u64::MAX;
        msg.uuid = Some(Uuid::new_v4());
        msg.properties.insert("ttl", "1.5").unwrap();
        msg.properties.insert("owner", "me").unwrap();
        let update = Update { msg, deadline: Some(1_700_000_000_000) };
        let mut out = Vec::new();
        update.encode(&mut out).unwrap();
        assert_eq!(decoded(&out), Ok(update));

        let delete = Update { msg: KvMsg::new("/a/b", ""), deadline: None };
        out.clear();
        delete.encode(&mut out).unwrap();
        assert_eq!(decoded(&out), Ok(delete));
    }

    #[test]
    fn refuses_what_it_could_not_read_back() {
        let mut out = Vec::new();
        let empty_key = Update { msg: KvMsg::new("", "v"), deadline: None };
        assert!(matches!(empty_key.encode(&mut out), Err(JournalError::Unwritable(Corruption::InvalidField(_)))));
        let huge = Update { msg: KvMsg::new("/k", vec![1; MAX_RECORD_LEN]), deadline: None };
        assert!(matches!(huge.encode(&mut out), Err(JournalError::Unwritable(Corruption::TooLong(_)))));
        assert!(out.is_empty());
    }

    #[test]
    fn every_cut_before_the_value_is_refused() {
        let mut msg = KvMsg::new("/k", "v");
        msg.uuid = Some(Uuid::new_v4());
        msg.properties.insert("ttl", "2").unwrap();
        let mut out = Vec::new();
        Update { msg, deadline: Some(5) }.encode(&mut out).unwrap();
        let payload = &out[HEADER_LEN..];
        // Every cut before the value is refused; the value itself has no length of its own (the
        // record's checksum is what protects it).
        for cut in 0..payload.len() - 1 {
            assert!(Update::decode(&payload[..cut]).is_err(), "cut at {cut}");
        }
        assert!(matches!(Update::decode(&[kind::SNAPSHOT_END]), Err(Corruption::UnexpectedKind(4))));
    }
}
