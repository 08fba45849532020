module github.com/acme/platform/gateway

go 1.26.0

require github.com/acme/platform/pkg v0.0.0

replace github.com/acme/platform/pkg => ../pkg
