package main

import (
	"fmt"

	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/bus/natsserver"
)

// loadKafkaUsers reads an auth file's users for the Kafka gateway's SASL
// PLAIN authentication and topic roles.
func loadKafkaUsers(file string) (kafka.Authorizer, error) {
	a, err := natsserver.LoadAuthFile(file)
	if err != nil {
		return nil, fmt.Errorf("kafka users: %w", err)
	}
	return kafka.NewUsers(a)
}
