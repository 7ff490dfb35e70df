package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// The review's two reproductions against a secret, end to end: domain
// fronting inside the bound host's TLS (a foreign Host header, an
// absolute target naming another host) is refused with 421 and audited,
// and nothing reaches the upstream; a reflected value printed split by
// escapes and controls is the placeholder in every view of the output
// (run_command's result, read_output stripped and raw, job://ID/output,
// a pty session's send_input answer and its screen).
func TestSecretsNotFrontedNorLeakedThroughEscapes(t *testing.T) {
	t.Parallel()
	sec := newSecretSetup(t)
	gw, value, up, caFile, valueFile := sec.gw, sec.value, sec.up, sec.caFile, sec.valueFile
	s := startServer(t, "SSL_CERT_FILE="+caFile, policyEnv(t, fmt.Sprintf(`
egress:
  allow: ["bound.sbx.test:%[1]s", "free.sbx.test:%[1]s"]
  hosts: {bound.sbx.test: %[2]s, free.sbx.test: %[2]s}
secrets:
  API_TOKEN: {value_file: %[3]s, hosts: ["bound.sbx.test:%[1]s"]}
`, up.port, gw, valueFile)))
	bound := "https://bound.sbx.test:" + up.port

	// 1. Fronting.
	r := s.ok("run_command", map[string]any{"secrets": []any{"API_TOKEN"}, "timeout_s": 120, "command": fmt.Sprintf(`
code() { curl -sS -o /dev/null -w '%%{http_code}' -H "X-Api-Key: $API_TOKEN" "$@"; }
echo "host=$(code -H 'Host: evil.example' %[1]s/front-host)"
echo "hostport=$(code -H 'Host: free.sbx.test:%[2]s' %[1]s/front-hostport)"
echo "target=$(code --request-target https://other.example:%[2]s/front-abs %[1]s/)"
echo "own=$(code %[1]s/own)"`, bound, up.port)})
	f := fFields(str(r, "stdout"))
	if f["host"] != "421" || f["hostport"] != "421" || f["target"] != "421" || f["own"] != "200" {
		t.Fatalf("fronting: %v\n%s", f, str(r, "stdout"))
	}
	for _, q := range up.requests() {
		if strings.HasPrefix(q.path, "/front") || q.host != "bound.sbx.test" {
			t.Errorf("a fronted request reached the upstream: %+v", q)
		}
	}
	var refusals int
	for _, e := range secretAudit(t, s) {
		if strings.HasPrefix(fmt.Sprint(e["error"])+fmt.Sprint(e["reason"]), "fronting refused") {
			refusals++
		}
	}
	if refusals != 3 {
		t.Errorf("audit: %d refused frontings, want 3: %v", refusals, secretAudit(t, s))
	}

	// 2. A reflected value printed split by escapes and controls.
	split := fmt.Sprintf(`v=$(curl -sS -H "X-Api-Key: $API_TOKEN" %s/reflect)
printf '\033[1m%%s\033[0m%%s\n' "${v:0:4}" "${v:4}"
printf '%%s\033[31m%%s\033[m\r%%s\n' "${v:0:9}" "${v:9:5}" "${v:14}"
printf '\033]0;t\a%%s\017%%s\n' "${v:0:2}" "${v:2}"
echo "mine=$API_TOKEN"`, bound)
	r = s.ok("run_command", map[string]any{"secrets": []any{"API_TOKEN"}, "timeout_s": 120, "command": split})
	id := str(r, "job_id")
	mine := fFields(str(r, "stdout"))["mine"]
	if !strings.HasPrefix(mine, "sbx_placeholder_") || strings.Count(str(r, "stdout"), mine) != 4 {
		t.Errorf("run_command's stdout has the placeholder %d times, want 4:\n%q", strings.Count(str(r, "stdout"), mine), str(r, "stdout"))
	}
	views := map[string]string{"run_command": str(r, "stdout")}
	views["read_output"] = str(s.ok("read_output", map[string]any{"job_id": id, "cursor": 0}), "output")
	views["read_output raw"] = str(s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "strip_ansi": false}), "output")
	for i, max := range []int{7, 13} {
		var pages strings.Builder
		for cursor := 0.0; ; {
			p := s.ok("read_output", map[string]any{"job_id": id, "cursor": cursor, "max_bytes": max})
			pages.WriteString(str(p, "output"))
			if num(t, p, "next_cursor") == cursor || p["has_more"] != true {
				break
			}
			cursor = num(t, p, "next_cursor")
		}
		views[fmt.Sprintf("read_output pages %d", i)] = pages.String()
	}
	res, err := s.readResourceErr("job://" + id + "/output")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Contents {
		if tc, ok := c.(mcp.TextResourceContents); ok {
			views["job://ID/output"] += tc.Text
		}
	}

	sess := s.startSession(map[string]any{"mode": "pty", "secrets": []any{"API_TOKEN"}, "cols": 11, "until": `\$ $`})
	sid := str(sess, "job_id")
	got, _ := s.typeLine(sid, split+"; echo END$((1+1))", "until", "END2", "wait_s", 30)
	views["send_input"] = got
	scr := s.ok("read_output", map[string]any{"job_id": sid, "screen": true})
	views["screen"] = strings.ReplaceAll(str(scr, "output"), "\n", "")
	s.ok("kill_job", map[string]any{"job_id": sid})

	for name, v := range views {
		if strings.Contains(v, value) {
			t.Errorf("%s holds the value:\n%q", name, v)
		}
		if !strings.Contains(v, "sbx_placeholder_") && !strings.HasPrefix(name, "read_output pages") && name != "screen" {
			t.Errorf("%s has no placeholder:\n%q", name, v)
		}
	}
}
