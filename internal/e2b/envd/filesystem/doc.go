// Package filesystem is the generated protobuf code of E2B envd's
// filesystem service (filesystem.proto, from e2b-dev/E2B's spec/envd;
// scripts/gen-envd.sh).
package filesystem
