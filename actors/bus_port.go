package actors

import "github.com/nats-io/nats.go"

// Bus is the client's one way to the nodes: exactly the calls its links
// make on a NATS connection (a reply inbox of their own, subscribed to
// with a handler; requests published with a reply subject in it) and the
// reader's in-doubt report (Publish). *nats.Conn is one; a simulation
// gives the client another (scenarios/sim's simulated bus), so that the
// shipped producer and reader run over a simulated network.
//
// A Bus delivers the replies as nats.go does: it calls the handler of the
// subscription whose subject matches the reply's, on a goroutine of its
// own, one message at a time, with the reply's subject; a request nothing
// answers for comes back as a message with no data and the header Status
// 503 ("no responders", as a connection with headers reports it).
// Subscribe may return a nil *nats.Subscription when the bus has no such
// thing; the links then only ignore what Unsubscribe answers.
type Bus interface {
	NewRespInbox() string
	Subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error)
	PublishRequest(subject, reply string, data []byte) error
	Publish(subject string, data []byte) error
}

var _ Bus = (*nats.Conn)(nil)

// bus is the client's Bus: ClientConfig.Bus, else its Conn.
func (c *Client) bus() Bus {
	if c.cfg.Bus != nil {
		return c.cfg.Bus
	}
	return c.cfg.Conn
}
