package kafka

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/bus/kafkawire"
)

// Per-connection limits.
const (
	// maxInflight bounds requests read but not yet answered on one
	// connection (Kafka clients pipeline up to 5 produce requests).
	maxInflight = 32
	// idleTimeout closes a connection that sends nothing for this long
	// (Kafka's connections.max.idle.ms is 10 min).
	idleTimeout = 10 * time.Minute
	// writeTimeout bounds writing one response.
	writeTimeout = 30 * time.Second
	// preAuthMaxBytes bounds a frame before SASL authentication.
	preAuthMaxBytes = 512 << 10
)

// conn serves one client connection. Requests are read one at a time;
// each is answered in a goroutine of its own (bounded by maxInflight) and
// the writer sends the answers in request order, as the protocol demands.
// Requests that change the connection's state (SASL) are handled before
// the next one is read.
type conn struct {
	g      *Gateway
	nc     net.Conn
	log    *slog.Logger
	remote string

	// Written only by the read loop (SASL), read by handlers started after.
	mech    string // SASL mechanism chosen by SaslHandshake
	rawSASL bool   // a SaslHandshake v0 was answered: a raw token comes next
	user    string // authenticated user; "" before SASL (or without it)
	authed  bool

	out  chan *pending
	quit chan struct{}
	once sync.Once
}

// pending is one request's place in the response order.
type pending struct {
	done  chan struct{}
	read  time.Time // when the request was read
	frame []byte    // nil: no response (acks=0 produce)
	close bool      // close the connection after this (instead of) answer
}

func newConn(g *Gateway, nc net.Conn) *conn {
	remote := nc.RemoteAddr().String()
	return &conn{g: g, nc: nc, remote: remote, log: g.log.With("remote", remote), authed: g.cfg.Users == nil,
		out: make(chan *pending, maxInflight), quit: make(chan struct{})}
}

func (c *conn) close() {
	c.once.Do(func() {
		close(c.quit)
		_ = c.nc.Close()
	})
}

// serve runs the read loop until the client goes away or sends something
// that ends the connection.
func (c *conn) serve() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.write()
	}()
	defer func() {
		c.close()
		close(c.out)
		wg.Wait()
		c.g.fetches.dropConn(c)
	}()
	defer func() {
		// A bug in a handler must cost this connection, never the gateway.
		if r := recover(); r != nil {
			c.log.Error("kafka gateway: panic serving a connection; closing it", "panic", r)
		}
	}()
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(idleTimeout))
		if c.rawSASL && !c.readRawSASL(br) {
			return
		}
		// Before SASL completes only small frames are read (Kafka's
		// sasl.server.max.receive.size), and requests the gateway does not
		// serve are never decoded: kmsg sizes arrays by their claimed counts.
		limit := c.g.cfg.MaxRequestBytes
		if !c.authed {
			limit = min(limit, preAuthMaxBytes)
		}
		req, err := kafkawire.ReadServedRequest(br, limit, decoded)
		if err != nil {
			c.readFailed(err)
			return
		}
		p := &pending{done: make(chan struct{}), read: time.Now()}
		select {
		case c.out <- p:
		case <-c.quit:
			return
		}
		if !c.dispatch(req, p) {
			return
		}
	}
}

func (c *conn) readFailed(err error) {
	select {
	case <-c.quit:
		return
	default:
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, kafkawire.ErrMalformed):
		c.log.Debug("kafka gateway: client closed the connection")
	case errors.As(err, &ne) && ne.Timeout():
		c.log.Info("kafka gateway: closing an idle connection", "idle", idleTimeout)
	default:
		c.log.Warn("kafka gateway: bad request frame; closing the connection", "err", err)
	}
}

// dispatch answers req into p: inline for requests that change the
// connection's state or must be refused, else in a goroutine. It returns
// false when the connection must end after p.
func (c *conn) dispatch(req *kafkawire.Request, p *pending) bool {
	if req.Body == nil {
		c.refuse(p, req)
		return !p.close
	}
	if !c.authed && !preAuth(req.Key) {
		c.log.Warn("kafka gateway: request before SASL authentication; closing the connection", "api", kmsg.NameForKey(req.Key))
		p.close = true
		close(p.done)
		return false
	}
	if inline(req.Key) {
		c.answer(p, req, c.handle(req))
		return !p.close
	}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c.log.Error("kafka gateway: panic answering a request; closing the connection", "api", kmsg.NameForKey(req.Key), "panic", r)
				p.close = true
				close(p.done)
			}
		}()
		c.answer(p, req, c.handle(req))
	}()
	return true
}

// answer encodes resp (nil: none) into p at the request's version and
// releases it to the writer.
func (c *conn) answer(p *pending, req *kafkawire.Request, resp kmsg.Response) {
	c.g.m.Request(kmsg.NameForKey(req.Key), respError(resp), time.Since(p.read))
	if resp != nil {
		resp.SetVersion(req.Version)
		p.frame = kafkawire.AppendResponse(nil, req.CorrelationID, resp)
	}
	close(p.done)
}

// refuse answers a request the gateway does not serve: ApiVersions with
// its v0 UNSUPPORTED_VERSION answer (encoded at v0, as KIP-511 has
// clients read it), anything else by closing the connection after a log
// line, as Kafka brokers do, so the client fails at once instead of
// waiting out its request timeout.
func (c *conn) refuse(p *pending, req *kafkawire.Request) {
	if resp := c.unsupported(req); resp != nil {
		p.frame = kafkawire.AppendResponse(nil, req.CorrelationID, resp)
	} else {
		p.close = true
	}
	close(p.done)
}

// write sends answers in request order.
func (c *conn) write() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	for p := range c.out {
		select {
		case <-p.done:
		case <-c.quit:
			return
		}
		if p.frame != nil {
			_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := bw.Write(p.frame); err != nil {
				c.close()
				return
			}
		}
		// Flush once nothing else is ready: pipelined answers share a write.
		if len(c.out) == 0 || p.close {
			if err := bw.Flush(); err != nil {
				c.close()
				return
			}
		}
		if p.close {
			c.close()
			return
		}
	}
}

// preAuth are the requests allowed before SASL authentication.
func preAuth(key int16) bool {
	switch key {
	case kmsg.ApiVersions.Int16(), kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16():
		return true
	}
	return false
}

// inline are the requests answered before the next is read: cheap ones,
// and SASL, which changes what the next request may do.
func inline(key int16) bool {
	switch key {
	case kmsg.ApiVersions.Int16(), kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16(),
		kmsg.Metadata.Int16(), kmsg.FindCoordinator.Int16(), kmsg.Heartbeat.Int16(),
		kmsg.InitProducerID.Int16(), kmsg.DescribeConfigs.Int16():
		return true
	}
	return false
}

// respError names the first error an answer carries, for the request
// metrics ("" for none, or for an answer without a top-level code).
func respError(resp kmsg.Response) string {
	code := int16(0)
	switch r := resp.(type) {
	case nil:
		return ""
	case *kmsg.ProduceResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				code = firstCode(code, p.ErrorCode)
			}
		}
	case *kmsg.FetchResponse:
		code = r.ErrorCode
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				code = firstCode(code, p.ErrorCode)
			}
		}
	case *kmsg.ListOffsetsResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				code = firstCode(code, p.ErrorCode)
			}
		}
	case *kmsg.CreatePartitionsResponse:
		for _, t := range r.Topics {
			code = firstCode(code, t.ErrorCode)
		}
	case *kmsg.JoinGroupResponse:
		code = r.ErrorCode
	case *kmsg.SyncGroupResponse:
		code = r.ErrorCode
	case *kmsg.HeartbeatResponse:
		code = r.ErrorCode
	case *kmsg.SASLAuthenticateResponse:
		code = r.ErrorCode
	case *kmsg.FindCoordinatorResponse:
		code = r.ErrorCode
	case *kmsg.InitProducerIDResponse:
		code = r.ErrorCode
	}
	if code == 0 {
		return ""
	}
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) {
		return ke.Message
	}
	return "UNKNOWN"
}

func firstCode(have, next int16) int16 {
	if have != 0 {
		return have
	}
	return next
}
