package auth

// FilesTokenPrefix starts every file transfer token: a data-plane capability
// for one byte stream (download, upload, tar, watch) of one path in one
// sandbox. The data plane makes and checks them (dataplane.FileTokens); the
// management API refuses them with wrong_token_kind.
const FilesTokenPrefix = "alf_"
