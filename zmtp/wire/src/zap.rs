//! The ZAP model (RFC 27): what an authenticator is asked and what it answers.

use alloc::{string::String, vec::Vec};
use bytes::Bytes;

use super::greeting::Mechanism;
use super::metadata::Metadata;

/// An authentication request, as ZAP would carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapRequest {
    /// The socket's ZAP domain (ZMQ_ZAP_DOMAIN).
    pub domain: String,
    /// The peer's IP address (empty for ipc/inproc).
    pub address: String,
    /// The routing id the peer announced.
    pub routing_id: Bytes,
    /// NULL, PLAIN or CURVE.
    pub mechanism: Mechanism,
    /// PLAIN: user name and password; CURVE: the client's 32-byte long-term public key; NULL: none.
    pub credentials: Vec<Bytes>,
}

/// An authenticator's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapReply {
    /// 200 success, 300 temporary failure (silent close), 400 denied, 500 internal error.
    pub status_code: u16,
    /// Human-readable reason.
    pub status_text: String,
    /// The authenticated user id, visible on received messages as `User-Id`.
    pub user_id: String,
    /// Extra properties, visible on received messages.
    pub metadata: Metadata,
}

impl ZapReply {
    /// Success with a user id.
    pub fn allow(user_id: impl Into<String>) -> ZapReply {
        ZapReply { status_code: 200, status_text: "OK".into(), user_id: user_id.into(), metadata: Metadata::new() }
    }

    /// Denial (status 400).
    pub fn deny(reason: impl Into<String>) -> ZapReply {
        ZapReply { status_code: 400, status_text: reason.into(), user_id: String::new(), metadata: Metadata::new() }
    }

    /// Whether the peer may proceed.
    pub fn is_allowed(&self) -> bool {
        self.status_code == 200
    }
}
