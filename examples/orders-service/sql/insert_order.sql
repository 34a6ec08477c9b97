INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)
