// Package deploy holds no code: its tests check the deployment files next to them
// (kubernetes/, compose.yaml, Dockerfile) against the configuration the binary
// actually reads, so `make test` catches a misspelled field or variable before an
// operator does. The Kubernetes API types are imported by the tests only.
package deploy
