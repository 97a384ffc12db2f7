// Package jsonrecord reads the records of the client API's application/json
// produce body itself, rather than with encoding/json, which would take a
// repeated name, a field name in another case or a string that is not
// UTF-8 with a result the sender does not see (Parse says how each is
// refused). The agent turns what Parse returns into batch records.
package jsonrecord
