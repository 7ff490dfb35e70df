// Package process is the generated protobuf code of E2B envd's process
// service (process.proto, from e2b-dev/E2B's spec/envd; scripts/gen-envd.sh).
package process
