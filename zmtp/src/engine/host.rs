//! What a connection (and the supervisor that starts connections) needs from the socket it belongs to: the interface the engine owns, which the
//! socket core implements. The engine never reaches into the socket's internals (its peer table,
//! routing, inbox); it attaches, delivers, reports subscriptions and detaches through this.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::error::{ConnectionError, LimitError};
use crate::link::live::LiveTasks;
use crate::link::peer_id::PeerId;
use crate::link::pipe::OutPipe;
use crate::message::{Message, Properties};
use crate::monitor::Monitors;
use crate::options::Options;
use crate::wire::{PeerInfo, SocketType};

/// What a connection gets when its socket takes the peer in.
pub(crate) struct Attached {
    pub peer: PeerId,
    /// Where the socket queues what this connection writes.
    pub out: Arc<OutPipe>,
    /// The peer's routing id where known, for the monitor.
    pub routing_id: Option<bytes::Bytes>,
}

/// The socket side of a connection.
pub(crate) trait Host: Send + Sync + 'static {
    fn socket_type(&self) -> SocketType;
    /// The options the connection runs with (taken once, at its start).
    fn options_snapshot(&self) -> Arc<Options>;
    fn monitors(&self) -> &Monitors;
    /// Cancelled when the socket starts closing.
    fn closing(&self) -> &CancellationToken;
    /// Whether `disconnect` was ever called on the socket (RECONNECT_STOP_AFTER_DISCONNECT).
    fn has_disconnected(&self) -> bool;
    /// Whether a connect-side slot still exists (the socket may drop one: a STREAM's own close).
    fn slot_alive(&self, slot: PeerId) -> bool;
    /// Whether a connect-side slot still has messages to deliver (a handshake then outlives close).
    fn slot_has_pending(&self, slot: PeerId) -> bool;
    /// Takes a handshaken peer in, or refuses it by the socket's own rules. `kill` is the
    /// connection's: the socket keeps a clone, and cancels it when it wants the connection closed
    /// (handover, disconnect, close).
    fn attach(
        &self,
        slot: Option<PeerId>,
        peer: &PeerInfo,
        minor: u8,
        kill: CancellationToken,
    ) -> Result<Attached, ConnectionError>;
    /// The properties attached to messages from this peer from now on.
    fn set_peer_properties(&self, peer: PeerId, properties: Arc<Properties>);
    /// The connection ended; `keep` keeps a connect-side slot (and its queue) for a reconnect.
    fn detach(&self, peer: PeerId, keep: bool);
    /// `disconnect`, or a connect that must not retry: the slot and its queue go.
    fn remove_slot(&self, slot: PeerId);
    /// The socket's running connection tasks (closing waits for them).
    fn live(&self) -> &Arc<LiveTasks>;
    /// Hands over a batch of received messages; waits while the peer's queue is at RCVHWM.
    fn deliver(&self, peer: PeerId, batch: &mut VecDeque<Message>) -> impl Future<Output = ()> + Send;
    /// A SUBSCRIBE/CANCEL from the peer; an error closes the connection.
    fn peer_subscription(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> Result<(), LimitError>;
    /// [`Host::peer_subscription`], handing the application's notice back instead of queueing it
    /// (a subscription frame inside a multipart message: XPUB_ONLY_FIRST_SUBSCRIBE's rules).
    #[cfg(feature = "draft")]
    fn subscription_notice(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> Result<Option<Message>, LimitError>;
    /// A JOIN/LEAVE from the peer (RADIO); an error closes the connection.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    fn peer_group(&self, peer: PeerId, group: &[u8], join: bool) -> Result<(), LimitError>;
    /// A RADIO's udp endpoint: this peer is sent every group's messages.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    fn takes_every_group(&self, peer: PeerId);
    /// Waits while the peer's inbound queue is at or over RCVHWM.
    fn wait_below_hwm(&self, peer: PeerId) -> impl Future<Output = ()> + Send;
}
