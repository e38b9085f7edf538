// Builds SeaweedFS's `weed` command (Apache-2.0) for the tiered-storage tests: its S3 gateway is
// the real S3 server they run against (`make e2e-tier`; e2e/tier/seaweedfs.py builds it).
module gannet.local/e2e/tier/weed

go 1.26.6

require github.com/seaweedfs/seaweedfs v0.0.0-20261109003541-7506e5f91cd6 // indirect
