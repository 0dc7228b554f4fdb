// Package bus is what raidq's clients and nodes say to each other over
// NATS: the subjects of a cluster (subjects.go), the compact binary wire
// messages of the write and read paths (wire.go, wire_scan.go, indoubt.go),
// and what a client needs to authenticate (client_auth.go, auth_probe.go).
// It links nats.go only; embedding the server is package natsserver.
package bus
