// Package processconnect is the generated Connect RPC code of E2B envd's
// process service (protoc-gen-connect-go; scripts/gen-envd.sh).
package processconnect
