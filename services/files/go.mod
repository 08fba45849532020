module github.com/acme/platform/services/files

go 1.26.0

require (
	github.com/acme/platform/pkg v0.0.0
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/klauspost/compress v1.20.3
	github.com/minio/minio-go/v7 v7.4.1
	go.mongodb.org/mongo-driver/v2 v2.9.3
)

require golang.org/x/image v0.47.0 // indirect

replace github.com/acme/platform/pkg => ../../pkg
