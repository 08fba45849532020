// Package deploycheck holds a test of the logs service's real NATS code
// path (natsingest.Setup and Ingestor, with the production defaults of
// app.Load) under the permissions of the compose deployment's NATS server
// configuration, deploy/nats.conf. scripts/composecheck checks every other
// user and the refused operations.
package deploycheck
