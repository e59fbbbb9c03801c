//! Socket options, named and defaulted as in libzmq.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::security::{Authenticator, KeyPair};
use crate::wire::Mechanism;

/// Default byte HWM per peer on the way out (see `Socket::set_sndhwm_bytes`): 128 MiB, far above
/// what the default HWM of 1000 messages holds for messages up to 128 KiB, so ordinary traffic never
/// meets it; it is what keeps a peer that stops reading from holding gigabytes of large messages.
pub const DEFAULT_SNDHWM_BYTES: usize = 128 * 1024 * 1024;

/// Default most frames per inbound message (`Socket::set_max_frames`): 65,536. libzmq has no such
/// limit; without one a peer that never ends a message makes us hold every frame it sends.
pub const DEFAULT_MAX_FRAMES: usize = 1 << 16;

/// Default most subscriptions per peer on a PUB/XPUB (`Socket::set_max_subscriptions`): 250,000
/// (about 70 MB of matching state for one peer at worst; 1M cost 280 MB with no limit).
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 250_000;

/// Default most subscription bytes per peer on a PUB/XPUB: 16 MiB.
pub const DEFAULT_MAX_SUBSCRIPTION_BYTES: usize = 16 << 20;

/// ZMQ_NOTIFY_CONNECT, for [`Socket::set_router_notify`](crate::Socket::set_router_notify).
pub const NOTIFY_CONNECT: u8 = 1;
/// ZMQ_NOTIFY_DISCONNECT, for [`Socket::set_router_notify`](crate::Socket::set_router_notify).
pub const NOTIFY_DISCONNECT: u8 = 2;
/// ZMQ_RECONNECT_STOP_CONN_REFUSED: a `tcp://` connect refused by the peer's host is not retried,
/// and the endpoint is forgotten. As in libzmq, whose ipc connecter never checks this bit, a
/// refused `ipc://` connect is retried.
pub const RECONNECT_STOP_CONN_REFUSED: u8 = 1;
/// ZMQ_RECONNECT_STOP_HANDSHAKE_FAILED: a connection that drops or times out during the handshake
/// is not remade (the endpoint stays: `disconnect` succeeds, as in libzmq).
pub const RECONNECT_STOP_HANDSHAKE_FAILED: u8 = 2;
/// ZMQ_RECONNECT_STOP_AFTER_DISCONNECT: once `disconnect` was called on the socket, a refused
/// `ipc://` connect is not retried (the endpoint stays). As in libzmq (4.3.5 and master), whose tcp
/// connecter never checks this bit, other transports keep retrying.
pub const RECONNECT_STOP_AFTER_DISCONNECT: u8 = 4;

/// Default ZMQ_BACKLOG. libzmq's is 100; ours is what tokio's listener had before the option
/// existed: with 100, a few hundred clients connecting at once (reconnecting after a failover)
/// overflow the queue and wait out TCP's SYN retransmits (1, 3, 7, 15, 31 s).
pub const DEFAULT_BACKLOG: u32 = 1024;

/// Options a socket applies to new connections (like libzmq, changing HWMs does not resize the queues
/// of connections that already exist).
#[derive(Clone)]
pub(crate) struct Options {
    /// ZMQ_SNDHWM: messages queued per peer on the way out (0 = unlimited). Default 1000.
    pub sndhwm: usize,
    /// ZMQ_RCVHWM: messages queued per peer on the way in (0 = unlimited). Default 1000.
    pub rcvhwm: usize,
    /// Our extension beside ZMQ_SNDHWM: bytes (payload + 64 per frame; an encoded batch's bytes) queued per peer on the way out, including
    /// what its connection is still writing (0 = unlimited). Default [`DEFAULT_SNDHWM_BYTES`].
    pub sndhwm_bytes: usize,
    /// ZMQ_LINGER: how long `close` waits for queued messages to go out (`None` = forever, libzmq -1).
    pub linger: Option<Duration>,
    /// ZMQ_ROUTING_ID: our identity announced in READY (REQ/DEALER/ROUTER).
    pub routing_id: Bytes,
    /// ZMQ_ROUTER_HANDOVER: a newcomer with a taken routing id takes it over.
    pub router_handover: bool,
    /// ZMQ_PROBE_ROUTER: send an empty message to every new peer.
    pub probe_router: bool,
    /// ZMQ_MAXMSGSIZE: largest inbound frame (`None` = unlimited, libzmq -1).
    pub maxmsgsize: Option<u64>,
    /// Our extension beside MAXMSGSIZE: most frames in one inbound message (`None` = unlimited).
    pub max_frames: Option<usize>,
    /// Our extension: received messages carry their connection's properties (`Message::property`).
    pub msg_properties: bool,
    /// Our extension: most distinct subscriptions a PUB/XPUB keeps for one peer (`None` = unlimited).
    pub max_subscriptions: Option<usize>,
    /// Our extension: most bytes of subscription prefixes a PUB/XPUB keeps for one peer.
    pub max_subscription_bytes: Option<usize>,
    /// ZMQ_RECONNECT_IVL: first wait before reconnecting (`None` = never reconnect, libzmq -1).
    pub reconnect_ivl: Option<Duration>,
    /// ZMQ_RECONNECT_IVL_MAX: cap of the doubling backoff (zero = no backoff).
    pub reconnect_ivl_max: Duration,
    /// ZMQ_HEARTBEAT_IVL: PING period (zero = off).
    pub heartbeat_ivl: Duration,
    /// ZMQ_HEARTBEAT_TTL: TTL we ask the peer to apply (rounded to deciseconds).
    pub heartbeat_ttl: Duration,
    /// ZMQ_HEARTBEAT_TIMEOUT: how long to wait for traffic after a PING (`None` = the interval).
    pub heartbeat_timeout: Option<Duration>,
    /// ZMQ_HANDSHAKE_IVL: the handshake must finish within this (`None` = no limit). Default 30 s.
    pub handshake_ivl: Option<Duration>,
    /// ZMQ_REQ_RELAXED: allow a new request before the reply.
    pub req_relaxed: bool,
    /// ZMQ_IPV6: `tcp://*` binds the IPv6 wildcard (dual stack).
    pub ipv6: bool,
    /// ZMQ_BACKLOG: connections a TCP listener queues before it accepts them.
    pub backlog: u32,
    /// ZMQ_MULTICAST_HOPS: the TTL of multicast a RADIO sends over udp://. Default 1 (this network).
    #[cfg(feature = "draft")]
    pub multicast_hops: u32,
    /// ZMQ_MULTICAST_LOOP: multicast a RADIO sends over udp:// reaches this host too. Default on.
    #[cfg(feature = "draft")]
    pub multicast_loop: bool,
    /// ZMQ_REQ_CORRELATE: REQ prefixes requests with an id and drops replies that do not carry it.
    pub req_correlate: bool,
    /// ZMQ_CONFLATE: keep only the last message in each queue (single-part messages).
    pub conflate: bool,
    /// ZMQ_XPUB_VERBOSE: XPUB passes every subscribe to the application, not only the first.
    pub xpub_verbose: bool,
    /// ZMQ_XPUB_VERBOSER: like XPUB_VERBOSE, and every unsubscribe too.
    pub xpub_verboser: bool,
    /// ZMQ_XPUB_WELCOME_MSG: sent to every new subscriber.
    pub xpub_welcome_msg: Option<Bytes>,
    /// ZMQ_STREAM_NOTIFY: a STREAM tells its application of each connection and disconnection with an
    /// empty message. Default on.
    #[cfg(feature = "draft")]
    pub stream_notify: bool,
    /// ZMQ_ROUTER_NOTIFY: bit 1, `[id, ""]` when a peer's handshake completes; bit 2, when it ends.
    #[cfg(feature = "draft")]
    pub router_notify: u8,
    /// ZMQ_HELLO_MSG: sent to every peer first, on each (re)connection (ROUTER, DEALER, CLIENT,
    /// SERVER, PEER).
    #[cfg(feature = "draft")]
    pub hello_msg: Option<Bytes>,
    /// ZMQ_DISCONNECT_MSG: received when a peer we accepted goes (ROUTER, SERVER, PEER).
    #[cfg(feature = "draft")]
    pub disconnect_msg: Option<Bytes>,
    /// ZMQ_HICCUP_MSG: received when a connection we made drops (DEALER, CLIENT, PEER).
    #[cfg(feature = "draft")]
    pub hiccup_msg: Option<Bytes>,
    /// ZMQ_RECONNECT_STOP: the `RECONNECT_STOP_*` bits that end a connect's retries.
    #[cfg(feature = "draft")]
    pub reconnect_stop: u8,
    /// ZMQ_XSUB_VERBOSE_UNSUBSCRIBE: an XSUB sends every unsubscribe upstream, not only the last.
    #[cfg(feature = "draft")]
    pub xsub_verbose_unsubscribe: bool,
    /// ZMQ_XPUB_MANUAL: the XPUB application decides who is subscribed to what.
    #[cfg(feature = "draft")]
    pub xpub_manual: bool,
    /// ZMQ_XPUB_MANUAL_LAST_VALUE: XPUB_MANUAL, and a send after a subscription arrived goes only
    /// to the subscriber it came from.
    #[cfg(feature = "draft")]
    pub xpub_manual_last_value: bool,
    /// ZMQ_ONLY_FIRST_SUBSCRIBE (XPUB, XSUB): in a multipart message only the first frame may be a
    /// subscription (unless it is one, when the rest are looked at too, as libzmq does).
    #[cfg(feature = "draft")]
    pub only_first_subscribe: bool,
    /// ZMQ_CONNECT_ROUTING_ID: the routing id a ROUTER gives the peer of its next `connect`.
    pub connect_routing_id: Option<Bytes>,
    /// ZMQ_TCP_KEEPALIVE: `None` = OS default (-1), else on/off.
    pub tcp_keepalive: Option<bool>,
    /// ZMQ_TCP_KEEPALIVE_IDLE: idle time before probes (`None` = OS default).
    pub tcp_keepalive_idle: Option<Duration>,
    /// ZMQ_TCP_KEEPALIVE_INTVL: interval between probes (`None` = OS default).
    pub tcp_keepalive_intvl: Option<Duration>,
    /// ZMQ_TCP_KEEPALIVE_CNT: probes before the connection is dropped (`None` = OS default).
    pub tcp_keepalive_cnt: Option<u32>,
    /// ZMQ_SNDBUF: the kernel's send buffer of each tcp/ipc connection, in bytes (`None` = OS
    /// default, libzmq's -1).
    pub sndbuf: Option<usize>,
    /// ZMQ_RCVBUF: the kernel's receive buffer of each tcp/ipc connection, in bytes (`None` = OS
    /// default, libzmq's -1).
    pub rcvbuf: Option<usize>,
    /// ZMQ_TOS: the IP type-of-service (IPv6 traffic class) of tcp connections (0 = left as the OS
    /// has it, as in libzmq).
    pub tos: u32,
    /// The security mechanism; like libzmq, the last PLAIN/CURVE option set decides it and the role.
    pub mechanism: Mechanism,
    /// Whether we are the server of the mechanism (ZMQ_PLAIN_SERVER / ZMQ_CURVE_SERVER).
    pub as_server: bool,
    /// ZMQ_PLAIN_USERNAME.
    pub plain_username: Bytes,
    /// ZMQ_PLAIN_PASSWORD.
    pub plain_password: Bytes,
    /// ZMQ_CURVE_SECRETKEY (and the public key derived from it).
    pub curve_keypair: Option<KeyPair>,
    /// ZMQ_CURVE_SERVERKEY: the server's public key, on a CURVE client.
    pub curve_serverkey: Option<[u8; 32]>,
    /// ZMQ_ZAP_DOMAIN.
    pub zap_domain: String,
    /// The authenticator consulted by server handshakes (libzmq: the ZAP handler).
    pub authenticator: Option<Arc<dyn Authenticator>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Passwords and keys stay out of logs.
        f.debug_struct("Options")
            .field("sndhwm", &self.sndhwm)
            .field("rcvhwm", &self.rcvhwm)
            .field("mechanism", &self.mechanism)
            .field("as_server", &self.as_server)
            .finish_non_exhaustive()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sndhwm: 1000,
            rcvhwm: 1000,
            sndhwm_bytes: DEFAULT_SNDHWM_BYTES,
            linger: None,
            routing_id: Bytes::new(),
            router_handover: false,
            probe_router: false,
            maxmsgsize: None,
            max_frames: Some(DEFAULT_MAX_FRAMES),
            msg_properties: true,
            max_subscriptions: Some(DEFAULT_MAX_SUBSCRIPTIONS),
            max_subscription_bytes: Some(DEFAULT_MAX_SUBSCRIPTION_BYTES),
            reconnect_ivl: Some(Duration::from_millis(100)),
            reconnect_ivl_max: Duration::ZERO,
            heartbeat_ivl: Duration::ZERO,
            heartbeat_ttl: Duration::ZERO,
            heartbeat_timeout: None,
            handshake_ivl: Some(Duration::from_secs(30)),
            req_relaxed: false,
            ipv6: false,
            backlog: DEFAULT_BACKLOG,
            #[cfg(feature = "draft")]
            multicast_hops: 1,
            #[cfg(feature = "draft")]
            multicast_loop: true,
            req_correlate: false,
            conflate: false,
            xpub_verbose: false,
            xpub_verboser: false,
            xpub_welcome_msg: None,
            #[cfg(feature = "draft")]
            stream_notify: true,
            #[cfg(feature = "draft")]
            router_notify: 0,
            #[cfg(feature = "draft")]
            hello_msg: None,
            #[cfg(feature = "draft")]
            disconnect_msg: None,
            #[cfg(feature = "draft")]
            hiccup_msg: None,
            #[cfg(feature = "draft")]
            reconnect_stop: 0,
            #[cfg(feature = "draft")]
            xsub_verbose_unsubscribe: false,
            #[cfg(feature = "draft")]
            xpub_manual: false,
            #[cfg(feature = "draft")]
            xpub_manual_last_value: false,
            #[cfg(feature = "draft")]
            only_first_subscribe: false,
            connect_routing_id: None,
            tcp_keepalive: None,
            tcp_keepalive_idle: None,
            tcp_keepalive_intvl: None,
            tcp_keepalive_cnt: None,
            sndbuf: None,
            rcvbuf: None,
            tos: 0,
            mechanism: Mechanism::Null,
            as_server: false,
            plain_username: Bytes::new(),
            plain_password: Bytes::new(),
            curve_keypair: None,
            curve_serverkey: None,
            zap_domain: String::new(),
            authenticator: None,
        }
    }
}
