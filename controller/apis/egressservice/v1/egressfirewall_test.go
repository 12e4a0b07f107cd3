package v1

import "testing"

// TestDNSNameKey: names compare without case and final dot; a wildcard
// keeps its label.
func TestDNSNameKey(t *testing.T) {
	for in, want := range map[string]string{"WWW.Example.COM.": "www.example.com", "a.example": "a.example", "*.Example.org": "*.example.org"} {
		if got := DNSNameKey(in); got != want {
			t.Errorf("DNSNameKey(%q) = %q, want %q", in, got, want)
		}
	}
}
