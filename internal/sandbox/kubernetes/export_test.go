package kubernetes

// Core is r's core/v1 client, for tests that read what the runtime made.
func Core(r *Runtime) coreV1 { return r.core }
