// Package filesystemconnect is the generated Connect RPC code of E2B envd's
// filesystem service (protoc-gen-connect-go; scripts/gen-envd.sh).
package filesystemconnect
