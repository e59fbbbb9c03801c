//! RADIO and DISH (RFC 48; libzmq's radio.cpp, dish.cpp): a DISH joins groups by name, exactly
//! (no prefixes), and a RADIO sends each message to the DISHes that joined its group.
//!
//! On the wire a DISH tells each RADIO `JOIN group` / `LEAVE group` commands (again to a RADIO it
//! reconnects to), and a RADIO sends a message as two frames, the group (MORE) then the body, which
//! the DISH turns back into one message carrying its group ([`Message::group`]). Groups are at most
//! 255 bytes. A RADIO drops a message for a DISH at its HWM (XPUB_NODROP: waits instead), as PUB
//! does; what a peer may join is bounded by the subscription limits (`max_subscriptions`,
//! `max_subscription_bytes`), and a JOIN beyond them closes its connection.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::{Pattern, RecvRule, SendFlags, TrySend};
use crate::error::{Error, LimitError, Result};
use crate::link::peer_id::{PeerId, PeerMap};
use crate::link::pipe::Outbound;
use crate::message::{MAX_GROUP_LEN, Message};
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

/// A DISH's joined groups and their bytes, for its limits.
#[derive(Debug, Default)]
struct Joined {
    groups: HashSet<Bytes>,
    bytes: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Radio {
    /// Group → the DISHes in it.
    members: HashMap<Bytes, Vec<PeerId>>,
    /// DISH → its groups.
    joined: PeerMap<Joined>,
    /// udp:// endpoints: sent every group (no JOIN travels over UDP; radio.cpp's `_udp_pipes`).
    everything: Vec<PeerId>,
}

/// The wire form of a grouped message: the group frame, then the body.
fn wire_form(group: Bytes, msg: Message) -> Message {
    let mut wire = msg;
    wire.push_front(group);
    wire
}

impl Radio {
    fn leave(&mut self, id: PeerId, group: &[u8]) {
        if let Some(list) = self.members.get_mut(group) {
            list.retain(|&member| member != id);
            if list.is_empty() {
                self.members.remove(group);
            }
        }
    }
}

impl Pattern for Radio {
    fn detached(&mut self, id: PeerId, _: bool, _: &Options, _: &mut Vec<super::Notice>) {
        self.everything.retain(|&peer| peer != id);
        if let Some(joined) = self.joined.remove(&id) {
            for group in &joined.groups {
                self.leave(id, group);
            }
        }
    }

    fn send(&mut self, peers: &mut Peers, mut msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        let group = msg.take_group().unwrap_or_default();
        if group.len() > MAX_GROUP_LEN {
            return Err(Error::InvalidArgument("a group is at most 255 bytes"));
        }
        let members = self.members.get(&group).map(Vec::as_slice).unwrap_or_default();
        let outs = members.iter().chain(&self.everything).filter_map(|id| peers.map.get(id)).map(|p| &p.out);
        if flags.xpub_nodrop() && outs.clone().any(|out| !out.has_room()) {
            msg.set_group(group);
            return Ok(TrySend::Full(msg));
        }
        let wire = wire_form(group, msg);
        for out in outs {
            // Lossy, as PUB: a member at its HWM misses this message.
            let _ = out.try_push(wire.clone());
        }
        Ok(TrySend::Sent)
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::NotSupported
    }

    fn takes_every_group(&mut self, peer: PeerId) {
        self.everything.push(peer);
    }

    fn peer_group(&mut self, peer: PeerId, group: &[u8], join: bool, options: &Options) -> Result<(), LimitError> {
        let joined = self.joined.entry(peer).or_default();
        if !join {
            if joined.groups.remove(group) {
                joined.bytes -= group.len();
                self.leave(peer, group);
            }
            return Ok(());
        }
        if joined.groups.contains(group) {
            return Ok(());
        }
        if let Some(limit) = options.max_subscriptions
            && joined.groups.len() >= limit
        {
            return Err(LimitError::Subscriptions { limit });
        }
        if let Some(limit) = options.max_subscription_bytes
            && joined.bytes + group.len() > limit
        {
            return Err(LimitError::SubscriptionBytes { limit });
        }
        let group = Bytes::copy_from_slice(group);
        joined.bytes += group.len();
        joined.groups.insert(group.clone());
        self.members.entry(group).or_default().push(peer);
        Ok(())
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Radio
    }
}

#[derive(Debug, Default)]
pub(crate) struct Dish {
    groups: HashSet<Bytes>,
}

impl Pattern for Dish {
    fn attached(&mut self, peers: &Peers, id: PeerId, _: Option<Bytes>, _: &Options) {
        if let Some(p) = peers.map.get(&id) {
            for group in &self.groups {
                p.out.push_command(Outbound::Join(group.clone(), true));
            }
        }
    }

    fn send(&mut self, _: &mut Peers, _: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        Err(Error::NotSupported(SocketType::Dish))
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::Stateful
    }

    /// The group frame becomes the message's group; a message of another shape is dropped, and so
    /// is one for a group left since it was sent (dish.cpp filters on receive too).
    fn on_recv(&mut self, _: PeerId, mut msg: Message, _: bool) -> Option<Message> {
        if msg.len() != 2 || msg[0].len() > MAX_GROUP_LEN || !self.groups.contains(&msg[0]) {
            return None;
        }
        let group = msg.pop_front()?;
        msg.set_group(group);
        Some(msg)
    }

    fn local_group(&mut self, peers: &Peers, group: &[u8], join: bool) -> Result<()> {
        if group.len() > MAX_GROUP_LEN {
            return Err(Error::InvalidArgument("a group is at most 255 bytes"));
        }
        let changed = if join { self.groups.insert(Bytes::copy_from_slice(group)) } else { self.groups.remove(group) };
        if !changed {
            return Err(Error::InvalidArgument(if join { "group already joined" } else { "group not joined" }));
        }
        let group = Bytes::copy_from_slice(group);
        for p in peers.map.values().filter(|p| p.connected) {
            p.out.push_command(Outbound::Join(group.clone(), join));
        }
        Ok(())
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Dish
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::HotOptions;
    use crate::socket::pattern::testing::{add_peer, leave, msg, taken};

    fn grouped(group: &'static str, body: &'static str) -> Message {
        msg(&[body]).with_group(group)
    }

    #[test]
    fn radio_sends_to_the_members_of_the_group_as_group_then_body() {
        let (mut r, mut peers) = (Radio::default(), Peers::default());
        let o = Options::default();
        let (a, b) = (add_peer(&mut r, &mut peers, 1, "", 10), add_peer(&mut r, &mut peers, 2, "", 10));
        r.peer_group(a, b"weather", true, &o).unwrap();
        r.peer_group(b, b"weather", true, &o).unwrap();
        r.peer_group(b, b"weather", true, &o).unwrap(); // a repeated JOIN is one membership
        r.peer_group(b, b"tv", true, &o).unwrap();
        let flags = SendFlags::default();
        for m in
            [grouped("weather", "sun"), grouped("tv", "news"), grouped("weath", "prefix: no match"), msg(&["none"])]
        {
            assert!(matches!(r.send(&mut peers, m, &flags), Ok(TrySend::Sent)));
        }
        assert_eq!(taken(&peers, a), [["weather", "sun"]]);
        assert_eq!(taken(&peers, b), [["weather", "sun"], ["tv", "news"]]);
        r.peer_group(b, b"weather", false, &o).unwrap();
        r.send(&mut peers, grouped("weather", "rain"), &flags).unwrap();
        assert_eq!(taken(&peers, a), [["weather", "rain"]]);
        assert!(taken(&peers, b).is_empty());
        leave(&mut r, &mut peers, a, false, &o);
        assert!(!r.members.contains_key(&b"weather"[..]), "the last member's exit removes the group");
    }

    #[test]
    fn a_udp_endpoint_takes_every_group() {
        let (mut r, mut peers) = (Radio::default(), Peers::default());
        let udp = add_peer(&mut r, &mut peers, 1, "", 10);
        r.takes_every_group(udp);
        for m in [grouped("a", "1"), grouped("b", "2"), msg(&["3"])] {
            r.send(&mut peers, m, &SendFlags::default()).unwrap();
        }
        assert_eq!(taken(&peers, udp), [["a", "1"], ["b", "2"], ["", "3"]]);
        leave(&mut r, &mut peers, udp, false, &Options::default());
        assert!(r.everything.is_empty());
    }

    #[test]
    fn radio_drops_for_a_full_member_or_waits_under_nodrop() {
        let (mut r, mut peers) = (Radio::default(), Peers::default());
        let a = add_peer(&mut r, &mut peers, 1, "", 1);
        r.peer_group(a, b"g", true, &Options::default()).unwrap();
        let lossy = SendFlags::default();
        r.send(&mut peers, grouped("g", "1"), &lossy).unwrap();
        assert!(matches!(r.send(&mut peers, grouped("g", "2"), &lossy), Ok(TrySend::Sent)), "dropped");
        let hot = HotOptions { xpub_nodrop: true.into(), ..HotOptions::default() };
        let Ok(TrySend::Full(back)) = r.send(&mut peers, grouped("g", "3"), &SendFlags::new(&hot)) else {
            panic!("nodrop waits")
        };
        assert_eq!(back.group().map(|g| &g[..]), Some(&b"g"[..]), "the message comes back as it was given");
        assert_eq!(taken(&peers, a), [["g", "1"]]);
    }

    #[test]
    fn radio_bounds_what_a_peer_joins_and_refuses_long_groups() {
        let (mut r, mut peers) = (Radio::default(), Peers::default());
        let a = add_peer(&mut r, &mut peers, 1, "", 10);
        let o = Options { max_subscriptions: Some(2), max_subscription_bytes: Some(5), ..Options::default() };
        r.peer_group(a, b"ab", true, &o).unwrap();
        assert_eq!(r.peer_group(a, b"cdef", true, &o), Err(LimitError::SubscriptionBytes { limit: 5 }));
        r.peer_group(a, b"c", true, &o).unwrap();
        assert_eq!(r.peer_group(a, b"d", true, &o), Err(LimitError::Subscriptions { limit: 2 }));
        let long = Message::from("x").with_group(vec![b'g'; 256]);
        assert!(matches!(r.send(&mut peers, long, &SendFlags::default()), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn dish_joins_once_tells_every_peer_and_filters_what_it_receives() {
        let (mut d, mut peers) = (Dish::default(), Peers::default());
        let a = add_peer(&mut d, &mut peers, 1, "", 10);
        d.local_group(&peers, b"weather", true).unwrap();
        assert!(matches!(d.local_group(&peers, b"weather", true), Err(Error::InvalidArgument(_))));
        assert!(matches!(d.local_group(&peers, b"tv", false), Err(Error::InvalidArgument(_))));
        assert!(matches!(d.local_group(&peers, &[b'g'; 256], true), Err(Error::InvalidArgument(_))));
        assert_eq!(taken(&peers, a), [["JOIN", "weather"]]);
        let b = add_peer(&mut d, &mut peers, 2, "", 10);
        assert_eq!(taken(&peers, b), [["JOIN", "weather"]], "a new RADIO hears the groups joined before");
        let got = d.on_recv(a, msg(&["weather", "sun"]), false).expect("joined");
        assert_eq!((got.group().cloned(), got.len()), (Some(Bytes::from_static(b"weather")), 1));
        assert_eq!(got[0], "sun");
        assert!(d.on_recv(a, msg(&["tv", "x"]), false).is_none(), "not joined");
        assert!(d.on_recv(a, msg(&["weather"]), false).is_none(), "no body");
        assert!(d.on_recv(a, msg(&["weather", "a", "b"]), false).is_none(), "multipart body");
        d.local_group(&peers, b"weather", false).unwrap();
        assert!(d.on_recv(a, msg(&["weather", "late"]), false).is_none(), "left since");
        assert_eq!(taken(&peers, a), [["LEAVE", "weather"]]);
    }
}
