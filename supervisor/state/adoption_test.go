package state

import (
	"encoding/json"
	"testing"
)

// An owned adoption's record from before ByUnit reads as then: every
// path mounted by the daemon; a new one names the paths a unit binds.
func TestAdoptionByUnit(t *testing.T) {
	var old Adoption
	if err := json.Unmarshal([]byte(`{"path":"/var/lib/pg","how":"owned","phase":"done"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Unit("/var/lib/pg") {
		t.Errorf("an old owned record is bound by a unit; want the daemon's mount, as then")
	}
	ad := Adoption{Path: "/var/lib/pg", More: []string{"/home/u/app"}, How: AdoptOwned, ByUnit: []string{"/var/lib/pg"}}
	data, err := json.Marshal(ad)
	if err != nil {
		t.Fatal(err)
	}
	var back Adoption
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Unit("/var/lib/pg") || back.Unit("/home/u/app") {
		t.Errorf("read back from %s: by unit %v, %v; want true, false", data, back.Unit("/var/lib/pg"), back.Unit("/home/u/app"))
	}
	if mount := (Adoption{Path: "/srv/a", How: AdoptMount}); !mount.Unit("/srv/a") {
		t.Errorf("an AdoptMount path is not bound by a unit")
	}
}
