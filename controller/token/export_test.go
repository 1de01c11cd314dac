package token

import "github.com/gitops-fleet/fleet/internal/apply"

// FieldManager is the field manager of the objects the token controller
// makes: they are server-side applied (internal/reconciler Objects), under
// the field manager of everything fleet applies.
const FieldManager = apply.FieldManager
