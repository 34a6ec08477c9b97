SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
