package bus

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// ServerInfo is the part of a NATS server's INFO line that explains a
// failed connect.
type ServerInfo struct {
	ServerName   string `json:"server_name"`
	TLSRequired  bool   `json:"tls_required"`
	AuthRequired bool   `json:"auth_required"`
	MaxPayload   int64  `json:"max_payload"`
}

// maxInfoLine bounds the INFO line ProbeServer reads.
const maxInfoLine = 64 << 10

// ProbeServer reads the INFO line a NATS server sends first on its client
// port (plaintext, before any TLS), to tell why a connect failed. rawURL
// may list several servers (comma-separated): the first is probed.
func ProbeServer(rawURL string, timeout time.Duration) (ServerInfo, error) {
	first, _, _ := strings.Cut(rawURL, ",")
	host := strings.TrimSpace(first)
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "4222")
	}
	c, err := net.DialTimeout("tcp", host, timeout)
	if err != nil {
		return ServerInfo{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReaderSize(c, 4096).ReadSlice('\n')
	if err != nil && len(line) == 0 {
		return ServerInfo{}, err
	}
	return ParseServerInfo(line)
}

// ParseServerInfo decodes an INFO line ("INFO {json}\r\n").
func ParseServerInfo(line []byte) (ServerInfo, error) {
	var info ServerInfo
	if len(line) > maxInfoLine {
		return info, fmt.Errorf("INFO line of %d bytes", len(line))
	}
	s, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "INFO ")
	if !ok {
		return info, fmt.Errorf("not a NATS INFO line: %.40q", line)
	}
	if err := json.Unmarshal([]byte(s), &info); err != nil {
		return info, fmt.Errorf("INFO: %w", err)
	}
	return info, nil
}
