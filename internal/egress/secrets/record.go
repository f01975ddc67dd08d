package secrets

import (
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
)

// FromRecord opens a stored secret (the store keeps model.SealedSecret,
// so this package needs no store). Stored fields that no longer parse are
// errors (the row was written by this package, so they indicate damage).
func (s *Sealer) FromRecord(rec model.SealedSecret) (Secret, error) {
	name, err := ParseName(rec.Name)
	if err != nil {
		return Secret{}, fmt.Errorf("stored secret: %w", err)
	}
	hosts, err := ParseHosts(rec.Hosts)
	if err != nil {
		return Secret{}, fmt.Errorf("stored secret %s: %w", name, err)
	}
	header, err := ParseHeader(rec.Header)
	if err != nil {
		return Secret{}, fmt.Errorf("stored secret %s: %w", name, err)
	}
	format, err := ParseFormat(rec.Format, header)
	if err != nil {
		return Secret{}, fmt.Errorf("stored secret %s: %w", name, err)
	}
	v, err := s.Open(rec.ProjectID, name, rec.Sealed)
	if err != nil {
		return Secret{}, err
	}
	return Secret{Project: rec.ProjectID, Name: name, Hosts: hosts, Header: header, Format: format, Value: v}, nil
}

// Record seals sec into the form the store keeps; the times are the caller's.
func (s *Sealer) Record(sec Secret) model.SealedSecret {
	return model.SealedSecret{
		ProjectID: sec.Project,
		Name:      string(sec.Name),
		Sealed:    s.Seal(sec.Project, sec.Name, sec.Value),
		Hosts:     HostStrings(sec.Hosts),
		Header:    sec.Header,
		Format:    sec.Format,
	}
}
