"""The command line: parse, call one function, render. No logic lives here."""
