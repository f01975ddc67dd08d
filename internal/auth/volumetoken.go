package auth

import (
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// VolumeTokenPrefix starts every volume content token: a management-API
// credential for the files of one volume of one project (the token of
// E2B's VolumeAndToken, which its SDK sends to the volume content API).
// The API accepts it as a bearer token only on the routes under
// /v1/volumes/{id}/files whose {id} is that volume's ID, and only while
// the volume exists in that project.
//
// It is made like a sandbox token (see SandboxTokenPrefix): signed with
// the keyring's active key, with its own audience, "airlock-volume", and
// no time, so it is deterministic and derived again, never stored: the
// same volume gets the same token until the key rotates
// (AttachKeyMaxAge), and an older one verifies until its key retires.
const VolumeTokenPrefix = "alv_"

const volumeAudience = "airlock-volume"

// VolumeClaims is what a volume content token names: one volume and the
// project that owns it.
type VolumeClaims struct {
	Volume  model.VolumeID  // vol
	Project model.ProjectID // prj
}

// IssueVolume signs c as a volume content token with the active key. The
// same claims and the same active key always give the same token.
func (i *Issuer) IssueVolume(c VolumeClaims) (string, error) {
	if _, err := model.ParseVolumeID(c.Volume.String()); err != nil {
		return "", fmt.Errorf("issue volume token: vol: %w", err)
	}
	if _, err := model.ParseProjectID(c.Project.String()); err != nil {
		return "", fmt.Errorf("issue volume token: prj: %w", err)
	}
	s, err := i.sign(scopedWire{Issuer: tokenIssuer, Audience: volumeAudience, Volume: c.Volume.String(), Project: c.Project.String()})
	if err != nil {
		return "", fmt.Errorf("sign volume token: %w", err)
	}
	return VolumeTokenPrefix + s, nil
}

// VerifyVolumeAt checks a volume content token at time now: the alv_
// prefix, an EdDSA signature by a known key not retired at now, issuer
// and audience, and well-formed claims. The caller checks that the volume
// still exists in the project. Every error wraps ErrInvalidToken.
func (v *Verifier) VerifyVolumeAt(token string, now time.Time) (VolumeClaims, error) {
	w, _, err := v.verifyScoped(token, VolumeTokenPrefix, volumeAudience, now)
	if err != nil {
		return VolumeClaims{}, err
	}
	var c VolumeClaims
	if c.Volume, err = model.ParseVolumeID(w.Volume); err != nil {
		return VolumeClaims{}, fmt.Errorf("%w: vol: %w", ErrInvalidToken, err)
	}
	if c.Project, err = model.ParseProjectID(w.Project); err != nil {
		return VolumeClaims{}, fmt.Errorf("%w: prj: %w", ErrInvalidToken, err)
	}
	return c, nil
}
