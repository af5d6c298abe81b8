package files

import "github.com/minio/minio-go/v7"

func minioMakeBucket() minio.MakeBucketOptions { return minio.MakeBucketOptions{Region: "us-east-1"} }
