"""Who may do what on a shared store, and the one function per action that both faces call.

`runwright server` (server/) and the CLI on the store itself (cli/backend) both go through
`Access`: it checks the actor's role in the run's project, does the action through the control
plane and the store, writes the audit record, and returns the response as JSON-ready data with
secrets masked and sample text redacted as the role requires. So an action behaves, is audited
and is shown the same way whichever face it came through.
"""
