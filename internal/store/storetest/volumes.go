package storetest

import (
	"errors"
	"sync"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func volumeTests() []namedTest {
	return []namedTest{
		{"VolumeRoundTrip", testVolumeRoundTrip},
		{"VolumeOtherProjectIsAbsent", testVolumeOtherProject},
		{"VolumeMountBindsNodeAndBlocksDelete", testVolumeMountBlocksDelete},
		{"VolumeElsewhereRefusesMount", testVolumeElsewhere},
		{"VolumeQuotaRace", testVolumeQuotaRace},
	}
}

func (e *env) newVolume(p model.ProjectID, name string, size int) model.Volume {
	e.t.Helper()
	v := model.Volume{ID: model.NewVolumeID(), ProjectID: p, Name: model.VolumeName(name), SizeMiB: size, CreatedAt: e.now()}
	must(e.t, e.s.CreateVolume(e.ctx, v, 0, nil))
	return v
}

func testVolumeRoundTrip(e *env) {
	t := e.t
	p := e.project()
	v := e.newVolume(p.ID, "data", 64)
	got, err := e.s.GetVolume(e.ctx, p.ID, model.VolumeRef{ID: v.ID})
	must(t, err)
	v.CreatedAt = v.CreatedAt.Truncate(1000).UTC()
	if got != v {
		t.Fatalf("GetVolume by ID = %+v, want %+v", got, v)
	}
	if got, err = e.s.GetVolume(e.ctx, p.ID, model.VolumeRef{Name: "data"}); err != nil || got.ID != v.ID {
		t.Fatalf("GetVolume by name = %+v, %v", got, err)
	}
	if got, err = e.s.GetVolumeByID(e.ctx, v.ID); err != nil || got.ID != v.ID {
		t.Fatalf("GetVolumeByID = %+v, %v", got, err)
	}
	// The name is the project's: a second "data" is refused, nothing written.
	dup := model.Volume{ID: model.NewVolumeID(), ProjectID: p.ID, Name: "data", SizeMiB: 16, CreatedAt: e.now()}
	mustIs(t, e.s.CreateVolume(e.ctx, dup, 0, nil), store.ErrAlreadyExists)
	_, err = e.s.GetVolumeByID(e.ctx, dup.ID)
	mustIs(t, err, store.ErrNotFound)
	// An unknown project is refused.
	orphan := model.Volume{ID: model.NewVolumeID(), ProjectID: model.NewProjectID(), Name: "x", SizeMiB: 16, CreatedAt: e.now()}
	mustIs(t, e.s.CreateVolume(e.ctx, orphan, 0, nil), store.ErrNotFound)
	// Bad values never reach the table.
	bad := model.Volume{ID: model.NewVolumeID(), ProjectID: p.ID, Name: "../x", SizeMiB: 16, CreatedAt: e.now()}
	mustIs(t, e.s.CreateVolume(e.ctx, bad, 0, nil), model.ErrInvalid)
	small := model.Volume{ID: model.NewVolumeID(), ProjectID: p.ID, Name: "small", SizeMiB: 1, CreatedAt: e.now()}
	mustIs(t, e.s.CreateVolume(e.ctx, small, 0, nil), model.ErrInvalid)

	e.newVolume(p.ID, "alpha", 16)
	list, err := e.s.ListVolumes(e.ctx, p.ID)
	must(t, err)
	if len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "data" {
		t.Fatalf("ListVolumes = %+v, want alpha and data", list)
	}
	if _, err := e.s.DeleteVolume(e.ctx, p.ID, v.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.GetVolume(e.ctx, p.ID, model.VolumeRef{ID: v.ID})
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.DeleteVolume(e.ctx, p.ID, v.ID)
	mustIs(t, err, store.ErrNotFound)
	// The name is free again.
	e.newVolume(p.ID, "data", 16)
}

func testVolumeOtherProject(e *env) {
	t := e.t
	p, other := e.project(), e.project()
	v := e.newVolume(p.ID, "data", 64)
	_, err := e.s.GetVolume(e.ctx, other.ID, model.VolumeRef{ID: v.ID})
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetVolume(e.ctx, other.ID, model.VolumeRef{Name: "data"})
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.DeleteVolume(e.ctx, other.ID, v.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.BindVolumeNode(e.ctx, other.ID, v.ID, e.homeNode())
	mustIs(t, err, store.ErrNotFound)
	if list, err := e.s.ListVolumes(e.ctx, other.ID); err != nil || len(list) != 0 {
		t.Fatalf("ListVolumes of another project = %+v, %v", list, err)
	}
	// Another project's volume cannot be mounted: the create is refused
	// and writes nothing.
	tpl := e.template()
	_, _, err = e.createOn(other.ID, tpl.Digest, e.homeNode(), func(sb *model.Sandbox) {
		sb.VolumeMounts = []model.VolumeMount{{Volume: v.ID, Path: "/data", SizeMiB: 64}}
	})
	mustIs(t, err, store.ErrVolumeNotFound)
	// The same name is another volume in another project.
	e.newVolume(other.ID, "data", 16)
}

func testVolumeMountBlocksDelete(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	v := e.newVolume(p.ID, "data", 64)
	mounts := []model.VolumeMount{{Volume: v.ID, Path: "/data", SizeMiB: 64}}
	sb, _, err := e.createOn(p.ID, tpl.Digest, node, func(sb *model.Sandbox) { sb.VolumeMounts = mounts })
	must(t, err)
	got := e.getSandbox(sb.ID)
	if len(got.VolumeMounts) != 1 || got.VolumeMounts[0] != mounts[0] {
		t.Fatalf("stored mounts = %+v, want %+v", got.VolumeMounts, mounts)
	}
	if v, err = e.s.GetVolumeByID(e.ctx, v.ID); err != nil || v.NodeID != node {
		t.Fatalf("volume after its first mount = %+v, %v; want it bound to %s", v, err, node)
	}
	users, err := e.s.VolumeUsers(e.ctx, v.ID)
	must(t, err)
	if len(users) != 1 || users[0] != sb.ID {
		t.Fatalf("VolumeUsers = %v, want [%s]", users, sb.ID)
	}
	// A second sandbox on the same node may mount it too.
	sb2, _, err := e.createOn(p.ID, tpl.Digest, node, func(sb *model.Sandbox) { sb.VolumeMounts = mounts })
	must(t, err)
	_, err = e.s.DeleteVolume(e.ctx, p.ID, v.ID)
	mustIs(t, err, store.ErrInUse)

	// A mount whose size disagrees with the volume's is refused.
	_, _, err = e.createOn(p.ID, tpl.Digest, node, func(sb *model.Sandbox) {
		sb.VolumeMounts = []model.VolumeMount{{Volume: v.ID, Path: "/data", SizeMiB: 128}}
	})
	mustIs(t, err, model.ErrInvalid)
	// An unplaced sandbox cannot mount one.
	_, _, err = e.createOn(p.ID, tpl.Digest, "", func(sb *model.Sandbox) { sb.VolumeMounts = mounts })
	mustIs(t, err, model.ErrInvalid)

	for _, s := range []model.Sandbox{sb, sb2} {
		s = e.run(e.getSandbox(s.ID), node)
		_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: s.ID, Operation: e.deleteOp(s), Now: e.now()})
		must(t, err)
	}
	// Deleting sandboxes still hold it.
	_, err = e.s.DeleteVolume(e.ctx, p.ID, v.ID)
	mustIs(t, err, store.ErrInUse)
	e.finishDelete(sb, node, e.now())
	e.finishDelete(sb2, node, e.now())
	if _, err := e.s.DeleteVolume(e.ctx, p.ID, v.ID); err != nil {
		t.Fatalf("DeleteVolume after its sandboxes were deleted: %v", err)
	}
	// A deleted volume cannot be mounted.
	_, _, err = e.createOn(p.ID, tpl.Digest, node, func(sb *model.Sandbox) { sb.VolumeMounts = mounts })
	mustIs(t, err, store.ErrVolumeNotFound)
}

func testVolumeElsewhere(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	home, other := e.homeNode(), e.node()
	v := e.newVolume(p.ID, "data", 64)
	bound, err := e.s.BindVolumeNode(e.ctx, p.ID, v.ID, home)
	must(t, err)
	if bound.NodeID != home {
		t.Fatalf("BindVolumeNode = %+v, want node %s", bound, home)
	}
	// Binding again elsewhere keeps the first node.
	again, err := e.s.BindVolumeNode(e.ctx, p.ID, v.ID, other)
	must(t, err)
	if again.NodeID != home {
		t.Fatalf("BindVolumeNode to another node = %+v, want it kept on %s", again, home)
	}
	_, _, err = e.createOn(p.ID, tpl.Digest, other, func(sb *model.Sandbox) {
		sb.VolumeMounts = []model.VolumeMount{{Volume: v.ID, Path: "/data", SizeMiB: 64}}
	})
	mustIs(t, err, store.ErrVolumeElsewhere)
}

func testVolumeQuotaRace(e *env) {
	t := e.t
	p := e.project()
	const limit = 100 // MiB: room for two volumes of 40, not three
	var wg sync.WaitGroup
	errs := make([]error, 6)
	now := e.now() // the env's clock is the test's, not the racers'
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := model.Volume{ID: model.NewVolumeID(), ProjectID: p.ID, Name: model.VolumeName("v" + string(rune('a'+i))), SizeMiB: 40, CreatedAt: now}
			errs[i] = e.s.CreateVolume(e.ctx, v, limit, nil)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		var qe *model.QuotaExceededError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &qe) && qe.Limit == model.VolumeQuotaLimit:
		default:
			t.Fatalf("CreateVolume: %v, want success or the volume quota", err)
		}
	}
	list, err := e.s.ListVolumes(e.ctx, p.ID)
	must(t, err)
	if ok != 2 || len(list) != 2 {
		t.Fatalf("%d creates succeeded and %d volumes stored, want 2 of 40 MiB under a %d MiB limit", ok, len(list), limit)
	}
}
