package sandboxes

import (
	"testing"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
)

func (f *fixture) volume(name string) model.Volume {
	f.t.Helper()
	v := model.Volume{ID: model.NewVolumeID(), ProjectID: f.proj, Name: model.VolumeName(name), SizeMiB: 64, CreatedAt: f.now}
	must(f.t, f.st.CreateVolume(f.ctx, v, 0, nil))
	return v
}

// A create mounts the project's volumes by name or ID, is placed where
// they live and binds them there; volumes of two nodes, another project's
// volume, qemu and a server that does not place are refused, writing
// nothing.
func TestCreateWithVolumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(Config{}, true)
	data, logs := f.volume("data"), f.volume("logs")
	created, err := f.create(s, func(r *CreateRequest) {
		r.Volumes = []VolumeMountRequest{{Volume: model.VolumeRef{Name: "data"}, Path: "/data"}, {Volume: model.VolumeRef{ID: logs.ID}, Path: "/logs"}}
	})
	must(t, err)
	want := []model.VolumeMount{{Volume: data.ID, Path: "/data", SizeMiB: 64}, {Volume: logs.ID, Path: "/logs", SizeMiB: 64}}
	sb := f.get(created.Sandbox.ID)
	if len(sb.VolumeMounts) != 2 || sb.VolumeMounts[0] != want[0] || sb.VolumeMounts[1] != want[1] || sb.NodeID != f.node {
		t.Fatalf("stored %+v on %s, want mounts %+v on %s", sb.VolumeMounts, sb.NodeID, want, f.node)
	}
	if v, err := f.st.GetVolumeByID(f.ctx, data.ID); err != nil || v.NodeID != f.node {
		t.Fatalf("volume after the create: %+v, %v", v, err)
	}

	// A volume that lives on another node: the sandbox may only go there
	// (this fixture's placer knows no such live node).
	elsewhere := f.volume("elsewhere")
	_, err = f.st.BindVolumeNode(f.ctx, f.proj, elsewhere.ID, model.NewNodeID())
	must(t, err)
	_, err = f.create(s, func(r *CreateRequest) {
		r.Volumes = []VolumeMountRequest{{Volume: model.VolumeRef{Name: "elsewhere"}, Path: "/x"}}
	})
	wantKind(t, err, NoEligibleNode)
	_, err = f.create(s, func(r *CreateRequest) {
		r.Volumes = []VolumeMountRequest{{Volume: model.VolumeRef{Name: "data"}, Path: "/a"}, {Volume: model.VolumeRef{Name: "elsewhere"}, Path: "/b"}}
	})
	wantKind(t, err, VolumeConflict)

	// Another project's volume does not exist.
	other := model.Project{ID: model.NewProjectID(), Name: "other", CreatedAt: t0}
	must(t, f.st.CreateProject(f.ctx, other))
	theirs := model.Volume{ID: model.NewVolumeID(), ProjectID: other.ID, Name: "theirs", SizeMiB: 64, CreatedAt: t0}
	must(t, f.st.CreateVolume(f.ctx, theirs, 0, nil))
	_, err = f.create(s, func(r *CreateRequest) {
		r.Volumes = []VolumeMountRequest{{Volume: model.VolumeRef{ID: theirs.ID}, Path: "/x"}}
	})
	wantKind(t, err, VolumeNotFound)

	// qemu cannot mount volumes.
	_, _, err = s.resolveVolumes(f.ctx, CreateRequest{Project: f.proj, Volumes: []VolumeMountRequest{{Volume: model.VolumeRef{Name: "data"}, Path: "/d"}}},
		environment.Selector{Name: environment.NameQEMU})
	wantKind(t, err, NotSupported)

	// A server that does not place sandboxes cannot bind volumes.
	_, err = f.create(f.service(Config{}, false), func(r *CreateRequest) {
		r.Volumes = []VolumeMountRequest{{Volume: model.VolumeRef{Name: "data"}, Path: "/data"}}
	})
	wantKind(t, err, NotSupported)

	if users, err := f.st.VolumeUsers(f.ctx, elsewhere.ID); err != nil || len(users) != 0 {
		t.Fatalf("refused creates mount the volume: %v, %v", users, err)
	}
}
