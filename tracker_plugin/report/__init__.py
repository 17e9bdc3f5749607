"""What a user reads: the text report, the JSON document, tables and plots."""
