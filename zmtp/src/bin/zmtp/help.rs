//! The words of `--help`: what each socket type does, and examples a newcomer can paste.

use zmtp::SocketType;

pub const TOOL_ABOUT: &str = "A netcat for ZeroMQ: open a socket of any type, send messages, print what arrives";

pub const TOOL_LONG_ABOUT: &str = "\
A netcat for ZeroMQ, for debugging a network of ZeroMQ processes.

Pick a socket type, --bind or --connect it, and zmtp sends the messages you give it (as arguments,
or one per line on stdin) and prints every message that arrives, one per line. It speaks ZMTP 3.x and
talks to libzmq, pyzmq, JeroMQ, NetMQ and other zmtp programs.";

pub const TOOL_AFTER_HELP: &str = "\
Messages:
  Each MESSAGE argument is one message; '|' separates its frames: 'weather|sunny' is two frames.
  Without MESSAGE arguments, each line of stdin is one message. --hex reads frames as hex.
  Received messages print one per line, frames joined by '|'; a frame that is not text prints
  as 0x<hex> (--format text|hex|json to choose). --delimiter changes the '|'.

Examples:
  Print what a publisher sends on topics starting with 'weather':
    zmtp sub --connect tcp://localhost:5556 --subscribe weather
  Publish a message every second:
    zmtp pub --bind 'tcp://*:5556' --repeat --interval 1000 'weather|sunny'
  Send a request and print the reply; run an echo server:
    zmtp req --connect tcp://localhost:5555 hello
    zmtp rep --bind 'tcp://*:5555' --echo
  A pipeline: one message per line of input, received by a puller that stops after 100:
    seq 100 | zmtp push --connect tcp://localhost:5557
    zmtp pull --bind 'tcp://*:5557' --count 100 --timeout 10
  A pub-sub forwarder:
    zmtp proxy --frontend 'xsub:bind:tcp://*:5559' --backend 'xpub:bind:tcp://*:5560'

Bound endpoints are printed on stderr, so 'tcp://127.0.0.1:*' (any free port) is easy to use.
Exit status: 0 done, 1 failure (e.g. address in use), 2 bad arguments (e.g. invalid endpoint),
3 --timeout expired first. Set RUST_LOG=debug to trace connections on stderr; -v prints
connection events.";

/// One line for the subcommand list.
pub fn about(t: SocketType) -> &'static str {
    match t {
        SocketType::Pub => "Publish messages to every subscriber",
        SocketType::Sub => "Subscribe to a publisher and print what it sends",
        SocketType::Req => "Send requests and print each reply (a client)",
        SocketType::Rep => "Print requests and answer each one (a server)",
        SocketType::Push => "Send messages into a pipeline, spread over the pullers",
        SocketType::Pull => "Print messages coming down a pipeline",
        SocketType::Dealer => "Send and receive freely; requests spread over peers (async client)",
        SocketType::Router => "Print messages with their sender's routing id; send by routing id",
        SocketType::Pair => "Talk to exactly one other PAIR socket, both ways",
        SocketType::XPub => "Publish like PUB and print the subscriptions that arrive",
        SocketType::XSub => "Subscribe like SUB, sending subscriptions as messages",
        SocketType::Server => "Answer CLIENTs' requests, each reply to its sender (draft, RFC 41)",
        SocketType::Client => "Send requests to SERVERs and print each reply (draft, RFC 41)",
        SocketType::Radio => "Send messages to the DISHes that joined a group (draft, RFC 48)",
        SocketType::Dish => "Join groups and print what RADIOs send to them (draft, RFC 48)",
        SocketType::Scatter => "Send single-frame messages round-robin to GATHERs (draft, RFC 49)",
        SocketType::Gather => "Print messages from SCATTERs, fair-queued (draft, RFC 49)",
        SocketType::Peer => "Talk to PEERs by routing id, both ways (draft, RFC 51)",
        SocketType::Channel => "Talk to exactly one other CHANNEL, both ways (draft, RFC 52)",
        SocketType::Stream => "Raw TCP: print what each connection sends, send to one by routing id",
    }
}

/// Notes and examples after the options of `zmtp <type> --help`.
pub fn details(t: SocketType) -> &'static str {
    match t {
        SocketType::Pub => {
            "\
PUB sends each message to every connected subscriber whose subscription matches its first frame,
and drops messages nobody is subscribed to yet: a subscriber that connects after a message was
sent never sees it. Publish repeatedly (--repeat --interval) or wait for subscribers (--delay).

Examples:
  Two messages, after giving subscribers half a second to join:
    zmtp pub --bind 'tcp://*:5556' --delay 500 'weather|sunny' 'sports|3-1'
  A heartbeat every second:
    zmtp pub --bind 'tcp://*:5556' --repeat --interval 1000 heartbeat
  Publish a growing log file, line by line:
    tail -f app.log | zmtp pub --connect tcp://collector:5556"
        }
        SocketType::Sub => {
            "\
SUB receives the messages whose first frame starts with one of its --subscribe prefixes
(everything when there is none) and prints them, one per line.

Examples:
  Everything a publisher sends:
    zmtp sub --connect tcp://localhost:5556
  The first 'weather…' message, failing (status 3) if none comes within 5 seconds:
    zmtp sub --connect tcp://localhost:5556 --subscribe weather --count 1 --timeout 5
  Let publishers connect to us; print JSON:
    zmtp sub --bind 'tcp://*:5556' --format json"
        }
        SocketType::Req => {
            "\
REQ sends one request, waits for its reply and prints it, then sends the next. It exits after the
last reply. Without MESSAGE arguments, each line of stdin is a request.

Examples:
  One request:
    zmtp req --connect tcp://localhost:5555 hello
  A two-frame request, giving up (status 3) after 3 seconds without a reply:
    zmtp req --connect tcp://localhost:5555 --timeout 3 'GET|/status'
  One request per line:
    printf 'one\\ntwo\\n' | zmtp req --connect tcp://localhost:5555"
        }
        SocketType::Rep => {
            "\
REP prints each request and sends a reply: the MESSAGE arguments in turn (then exits, unless
--repeat), each line of stdin when there are no MESSAGE arguments, or the request itself (--echo).

Examples:
  An echo server:
    zmtp rep --bind 'tcp://*:5555' --echo
  Always answer OK:
    zmtp rep --bind 'tcp://*:5555' --repeat OK
  Type each reply yourself:
    zmtp rep --bind 'tcp://*:5555'"
        }
        SocketType::Push => {
            "\
PUSH sends each message to one PULL peer, taking turns; it waits while there is no peer, then
exits once every message is sent.

Examples:
  Three tasks:
    zmtp push --connect tcp://localhost:5557 task1 task2 task3
  One message per line:
    seq 1000 | zmtp push --connect tcp://localhost:5557
  A two-frame binary message:
    zmtp push --bind 'tcp://*:5557' --hex '00ff|cafe'"
        }
        SocketType::Pull => {
            "\
PULL prints every message pushed to it, fairly from all its PUSH peers.

Examples:
  Everything pushed to port 5557:
    zmtp pull --bind 'tcp://*:5557'
  Ten messages on any free port (stderr tells which), within 30 seconds:
    zmtp pull --bind 'tcp://127.0.0.1:*' --count 10 --timeout 30"
        }
        SocketType::Dealer => {
            "\
DEALER sends without waiting for replies (taking turns among its peers) and prints whatever
arrives. A REP expects an empty first frame: send '|hello'. It runs until Ctrl-C, --timeout, or
--count N messages received (--count 0: exit once everything is sent).

Examples:
  Say hello to a ROUTER as client-1 and print one answer:
    zmtp dealer --connect tcp://localhost:5555 --routing-id client-1 --count 1 hello
  Talk to a REP:
    zmtp dealer --connect tcp://localhost:5555 --count 1 '|hello'"
        }
        SocketType::Router => {
            "\
ROUTER prints each message prefixed with its sender's routing id: the peer's --routing-id, or a
generated 0x00xxxxxxxx. To send, make the routing id the first frame: 'client-1|welcome' (binary
ids as printed: '0x0080000001|welcome'). zmtp waits for the addressed peer to connect and never
drops a message silently.

Examples:
  See who sends what:
    zmtp router --bind 'tcp://*:5555'
  Greet client-1 once it connects, and print its first message:
    zmtp router --bind 'tcp://*:5555' --count 1 'client-1|welcome'"
        }
        SocketType::Pair => {
            "\
PAIR talks to exactly one other PAIR socket, both ways: it sends the MESSAGE arguments or stdin
lines and prints what arrives, like netcat.

Examples:
  Type lines, see the other side's:
    zmtp pair --bind 'tcp://*:5558'
  Send one message and exit:
    zmtp pair --connect tcp://localhost:5558 --count 0 hello"
        }
        SocketType::XPub => {
            "\
XPUB publishes like PUB and prints each subscription its subscribers send: \\x01topic for a
subscribe, \\x00topic for an unsubscribe (by default only the first subscribe of a topic and the
last unsubscribe; --xpub-verbose and --xpub-verboser show them all).

Examples:
  Who subscribes to what:
    zmtp xpub --bind 'tcp://*:5556' --xpub-verboser
  Greet every new subscriber:
    zmtp xpub --bind 'tcp://*:5556' --xpub-welcome-msg hello"
        }
        SocketType::XSub => {
            "\
XSUB receives like SUB, but subscribing means sending a message upstream: --subscribe sends one,
as does a message whose first byte is 01 (--hex 01…). It has no default subscription.

Examples:
  Messages on topics starting with 'weather':
    zmtp xsub --connect tcp://localhost:5556 --subscribe weather
  Subscribe to everything by sending the subscription message yourself:
    zmtp xsub --connect tcp://localhost:5556 --hex 01"
        }
        SocketType::Server => {
            "\
SERVER (one of libzmq's draft types) prints each request and answers it, like REP, but requests
from many CLIENTs may interleave: each reply goes to the routing id its request came from.
Messages are single frames ('|' is not a separator here).

Examples:
  Echo every request:
    zmtp server --bind 'tcp://*:5555' --echo
  Answer two requests, then exit:
    zmtp server --bind 'tcp://*:5555' --count 2 pong pong"
        }
        SocketType::Client => {
            "\
CLIENT (draft) sends one request, waits for its reply and prints it, like REQ, to SERVER sockets
(spread round-robin over several). Messages are single frames.

Examples:
  One request, failing (status 3) without a reply in 5 seconds:
    zmtp client --connect tcp://localhost:5555 --timeout 5 ping"
        }
        SocketType::Radio => {
            "\
RADIO (draft) sends each message to the DISHes that joined its --group (an exact name, not a
prefix), and drops it for DISHes that did not: like PUB, a DISH that connects late misses what
was sent before. Messages are single frames.

Examples:
  The weather, every second:
    zmtp radio --bind 'tcp://*:5556' --group weather --repeat --interval 1000 sunny
  The same as UDP datagrams to a multicast group (a RADIO connects to where it sends):
    zmtp radio --connect udp://239.0.0.1:5556 --group weather --repeat --interval 1000 sunny"
        }
        SocketType::Dish => {
            "\
DISH (draft) joins each --join group and prints what RADIOs send to them as GROUP|BODY.

Examples:
  The first weather report:
    zmtp dish --connect tcp://localhost:5556 --join weather --count 1
  From UDP multicast (a DISH binds the group; name the interface with 'udp://eth0;239.0.0.1:5556'):
    zmtp dish --bind udp://239.0.0.1:5556 --join weather"
        }
        SocketType::Scatter => {
            "\
SCATTER (draft) is PUSH for single frames: each message goes to the next GATHER in turn.

Examples:
    seq 100 | zmtp scatter --connect tcp://localhost:5557"
        }
        SocketType::Gather => {
            "\
GATHER (draft) is PULL for single frames: it prints what SCATTERs send, fairly from each.

Examples:
    zmtp gather --bind 'tcp://*:5557' --count 100 --timeout 10"
        }
        SocketType::Peer => {
            "\
PEER (draft) talks to other PEERs, each addressed by a routing id. Here, messages go to the PEER
of the first --connect; messages that arrive, from any peer, are printed.

Examples:
  Listen and print:
    zmtp peer --bind 'tcp://*:5558'
  Say hello to it:
    zmtp peer --connect tcp://localhost:5558 --count 0 hello"
        }
        SocketType::Channel => {
            "\
CHANNEL (draft) is PAIR for single frames: one peer, messages both ways.

Examples:
    zmtp channel --bind 'tcp://*:5559'
    zmtp channel --connect tcp://localhost:5559 --count 0 hello"
        }
        SocketType::Stream => {
            "\
STREAM speaks raw TCP, not ZeroMQ: each connection has a routing id (printed as 0x<hex>) that comes
first on what it sends, ID|BYTES, with ID| and nothing after it when a connection is made and when
it ends (unless --no-stream-notify). Send ID|BYTES to write to a connection, ID| to close it.

Examples:
  A tiny TCP server that shows what clients send:
    zmtp stream --bind 'tcp://*:8080'
  Talk to a plain TCP service (its first message gives the id to answer to):
    zmtp stream --connect tcp://localhost:7 -v"
        }
    }
}

/// Type-specific wording of shared options.
pub fn overrides(t: SocketType) -> Vec<(&'static str, &'static str)> {
    match t {
        SocketType::Pub | SocketType::Push => {
            vec![
                ("count", "Exit after sending N messages (with --repeat)"),
                ("delimiter", "Frame separator in messages"),
            ]
        }
        SocketType::Sub | SocketType::Pull => {
            vec![("count", "Exit after receiving N messages"), ("delimiter", "Frame separator in printed messages")]
        }
        SocketType::Req => vec![
            ("count", "Exit after N replies (with --repeat, the requests cycle until then)"),
            ("messages", "Requests, one per argument ('|' separates frames); without any, stdin lines"),
        ],
        SocketType::Rep => vec![
            ("count", "Exit after answering N requests"),
            ("messages", "Replies, one per request in turn; without any (and no --echo), stdin lines"),
            ("repeat", "Cycle through the replies forever"),
        ],
        SocketType::Router => vec![
            ("count", "Exit after receiving N messages (0: exit once everything is sent)"),
            ("messages", "Messages to send, each starting with the receiver's routing id: 'client-1|hi'"),
        ],
        _ => vec![("count", "Exit after receiving N messages (0: exit once everything is sent)")],
    }
}

pub const PROXY_ABOUT: &str = "Forward messages between two sockets, optionally copying them to a capture socket";

pub const PROXY_DETAILS: &str = "\
Each socket is written TYPE:bind:ENDPOINT or TYPE:connect:ENDPOINT. Usual pairs: xsub/xpub (a
pub-sub forwarder: subscriptions travel upstream), router/dealer (a request broker: REQ clients
connect to the frontend, REP workers to the backend), pull/push (a pipeline streamer). The capture
socket (pub, push, pair, dealer or xpub) receives a copy of every message, both directions.

Examples:
  A pub-sub forwarder: publishers connect to 5559, subscribers to 5560:
    zmtp proxy --frontend 'xsub:bind:tcp://*:5559' --backend 'xpub:bind:tcp://*:5560'
  A request broker whose traffic you can watch on 5561:
    zmtp proxy --frontend 'router:bind:tcp://*:5559' --backend 'dealer:bind:tcp://*:5560' \\
               --capture 'pub:bind:tcp://127.0.0.1:5561'
    zmtp sub --connect tcp://127.0.0.1:5561";
