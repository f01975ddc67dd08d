package control

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// E2B's secrets API on Airlock's secrets (the caller's project's, sealed
// with the server's key). An E2B secret is an Airlock secret without hosts:
// the proxy sends it only where a sandbox's network.rules name it with
// "${e2b.secrets.NAME}" (network.go). Names are lower-cased, as E2B stores
// them; Airlock's name rules apply ([a-z0-9][a-z0-9_-]{0,63} once
// lower-cased), and "sec_" is reserved for IDs. A secret is selected by
// its ID (sec_…) or its name. Values are write-only: no answer carries one.
//
//	POST   /secrets            {name, value, metadata?} → 201 Secret (409 if the name is taken)
//	GET    /secrets            ?limit&nextToken → 200 [Secret], X-Next-Token
//	GET    /secrets/{secret}   → 200 Secret
//	POST   /secrets/{secret}   {value, metadata?} → 200 Secret (a new version; metadata replaced when given)
//	DELETE /secrets/{secret}   → 204
//
// Another project's secret, like a missing one, is 404.

// secretOut is E2B's Secret.
type secretOut struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func toSecretOut(s apiv1.Secret) secretOut {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return secretOut{SecretID: s.ID, Name: s.Name, CurrentVersion: s.Version, Metadata: md, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

type newSecretIn struct {
	Name     string            `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

type secretUpdateIn struct {
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// secretName is the stored form of an E2B secret name.
func secretName(s string) (string, error) {
	n := strings.ToLower(s)
	switch {
	case n == "":
		return "", badRequest("name is required")
	case strings.HasPrefix(n, "sec_"):
		return "", badRequest("secret name %q: the sec_ prefix is reserved for secret identifiers", s)
	}
	return n, nil
}

// createSecret: POST /secrets → 201.
func (h *Handler) createSecret(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var in newSecretIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	name, err := secretName(in.Name)
	if err != nil {
		return err
	}
	if in.Value == nil {
		return badRequest("value is required")
	}
	s, err := c.CreateSecret(ctx, name, apiv1.PutSecretRequest{Value: *in.Value, Metadata: in.Metadata})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toSecretOut(s))
	return nil
}

// findSecret returns the project's secret selected by ID or name; a
// secret that is not there (another project's, or a name that cannot be
// one) is 404.
func findSecret(ctx context.Context, c *client.Client, sel string) (apiv1.Secret, error) {
	notFound := &httpError{status: http.StatusNotFound, msg: "secret " + sel + " not found"}
	if _, err := model.ParseSecretID(sel); err == nil {
		list, err := c.ListSecrets(ctx)
		if err != nil {
			return apiv1.Secret{}, err
		}
		for _, s := range list.Secrets {
			if s.ID == sel {
				return s, nil
			}
		}
		return apiv1.Secret{}, notFound
	}
	name := strings.ToLower(sel)
	if !secretNameRE.MatchString(name) {
		return apiv1.Secret{}, notFound // a name no Airlock secret can have
	}
	s, err := c.GetSecret(ctx, name)
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return apiv1.Secret{}, notFound
	}
	return s, err
}

// secretNameRE is Airlock's secret names, lower-cased.
var secretNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// getSecret: GET /secrets/{secret} → 200.
func (h *Handler) getSecret(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	s, err := findSecret(ctx, c, r.PathValue("secret"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSecretOut(s))
	return nil
}

// updateSecret: POST /secrets/{secret} → 200. The value becomes the
// secret's next version; the secret's hosts, header and format (set
// through Airlock's own API) stay; metadata is replaced when given.
func (h *Handler) updateSecret(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var in secretUpdateIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	if in.Value == nil {
		return badRequest("value is required")
	}
	cur, err := findSecret(ctx, c, r.PathValue("secret"))
	if err != nil {
		return err
	}
	md := cur.Metadata
	if in.Metadata != nil {
		md = in.Metadata
	}
	s, err := c.PutSecret(ctx, cur.Name, apiv1.PutSecretRequest{Value: *in.Value, Hosts: cur.Hosts, Header: cur.Header, Format: cur.Format, Metadata: md})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSecretOut(s))
	return nil
}

// deleteSecret: DELETE /secrets/{secret} → 204.
func (h *Handler) deleteSecret(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	cur, err := findSecret(ctx, c, r.PathValue("secret"))
	if err != nil {
		return err
	}
	if _, err := c.DeleteSecret(ctx, cur.Name); err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return &httpError{status: http.StatusNotFound, msg: "secret " + cur.Name + " not found"}
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// maxSecretPage bounds limit.
const maxSecretPage = 100

// listSecrets: GET /secrets → 200, in name order; X-Next-Token names
// where the next page starts (after that name).
func (h *Handler) listSecrets(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	q := r.URL.Query()
	limit := maxSecretPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSecretPage {
			return badRequest("limit must be 1 to %d", maxSecretPage)
		}
		limit = n
	}
	after := ""
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) == 0 {
			return badRequest("nextToken is not one this server issued")
		}
		after = string(b)
	}
	list, err := c.ListSecrets(ctx)
	if err != nil {
		return err
	}
	all := list.Secrets
	slices.SortFunc(all, func(a, b apiv1.Secret) int { return strings.Compare(a.Name, b.Name) })
	start := 0
	if after != "" {
		start, _ = slices.BinarySearchFunc(all, after, func(s apiv1.Secret, n string) int {
			if s.Name <= n {
				return -1
			}
			return 1
		})
	}
	page := all[start:min(start+limit, len(all))]
	out := make([]secretOut, 0, len(page))
	for _, s := range page {
		out = append(out, toSecretOut(s))
	}
	if start+limit < len(all) {
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Name)))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
