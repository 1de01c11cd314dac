package decrypt

import (
	"fmt"
	"strings"
	"testing"

	"filippo.io/age"
)

func TestKeysFromSecretData_ReadsAgeKeysOnly(t *testing.T) {
	a, b := newIdentity(t), newIdentity(t)
	pq, err := age.GenerateHybridIdentity()
	if err != nil {
		t.Fatal(err)
	}
	k, err := KeysFromSecretData(map[string][]byte{
		// What age-keygen writes, and two keys in one value.
		"a.agekey": []byte("# created: 2026-12-05T06:00:00Z\n# public key: " + a.Recipient().String() + "\n" + a.String() + "\n"),
		"b.agekey": []byte("\n" + b.String() + "\r\n" + pq.String() + "\n"),
		// Not ending in .agekey: ignored, whatever it holds.
		"README": []byte("not a key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a.Recipient().String(), b.Recipient().String(), pq.Recipient().String()}
	if got := k.Recipients(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("recipients %v, want %v", got, want)
	}
	for _, printed := range []string{k.String(), fmt.Sprintf("%v", k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k)} {
		if strings.Contains(printed, "AGE-SECRET-KEY") {
			t.Fatalf("printing Keys shows a private key: %s", printed)
		}
	}
}

func TestKeysFromSecretData_Refusals(t *testing.T) {
	id := newIdentity(t)
	// Change the checksum's last character to one it is not (a fixed
	// replacement equals the original one time in 32).
	good := id.String()
	last := good[len(good)-1]
	badLast := byte('Q')
	if last == 'Q' {
		badLast = 'P'
	}
	badChecksum := good[:len(good)-1] + string(badLast)
	for name, c := range map[string]struct {
		data map[string][]byte
		want string
	}{
		"no .agekey key":  {map[string][]byte{"identity": []byte(id.String())}, `ending in ".agekey"`},
		"only comments":   {map[string][]byte{"k.agekey": []byte("# nothing\n\n")}, "no age identity"},
		"plugin identity": {map[string][]byte{"k.agekey": []byte("AGE-PLUGIN-YUBIKEY-1QQQQQQ\n")}, "plugin"},
		"garbage line":    {map[string][]byte{"k.agekey": []byte(id.String() + "\nhunter2-not-a-key\n")}, `"k.agekey", line 2`},
		"bad checksum":    {map[string][]byte{"k.agekey": []byte(badChecksum)}, "not a valid age identity"},
		"ssh key":         {map[string][]byte{"k.agekey": []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n")}, "not an age identity"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := KeysFromSecretData(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "AGE-SECRET-KEY") || strings.Contains(err.Error(), "YUBIKEY") {
				t.Fatalf("the error shows the key's content: %v", err)
			}
		})
	}
}
