package client

import "fmt"

// allPages calls page with cursor, then with each next cursor it returns,
// until a page has none, and returns every page's items in order. route
// names the listing in errors; a cursor returned twice is an error (a
// server that would loop forever).
func allPages[T any](route, cursor string, page func(cursor string) ([]T, string, error)) ([]T, error) {
	all := []T{}
	seen := map[string]bool{}
	for {
		items, next, err := page(cursor)
		if err != nil {
			return all, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		if seen[next] {
			return all, fmt.Errorf("GET %s: the server returned cursor %q twice", route, next)
		}
		seen[next] = true
		cursor = next
	}
}
