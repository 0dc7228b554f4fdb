package kafka

// KafkaStripe is kafkaStripe for the package's external tests.
var KafkaStripe = kafkaStripe
