-- The sample database of `make run`: a small shop with related tables and realistic types.
CREATE SCHEMA shop;

CREATE TABLE shop.customers (
    id          bigint PRIMARY KEY,
    email       text NOT NULL UNIQUE,
    full_name   text NOT NULL,
    vip         boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    profile     jsonb
);

CREATE TABLE shop.products (
    id          integer PRIMARY KEY,
    name        text NOT NULL,
    price       numeric(10,2) NOT NULL,
    stock       integer NOT NULL,
    attributes  json
);

CREATE TABLE shop.orders (
    id           bigint PRIMARY KEY,
    customer_id  bigint NOT NULL REFERENCES shop.customers(id),
    product_id   integer NOT NULL REFERENCES shop.products(id),
    quantity     smallint NOT NULL,
    total        numeric(12,2) NOT NULL,
    status       varchar(16) NOT NULL,
    ordered_at   timestamptz NOT NULL,
    note         text
);

INSERT INTO shop.customers (id, email, full_name, vip, created_at, profile)
SELECT g, 'customer' || g || '@example.com', 'Customer ' || g, g % 10 = 0,
       TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '37 minutes',
       jsonb_build_object('tier', g % 3, 'newsletter', g % 2 = 0)
FROM generate_series(1, 500) g;

INSERT INTO shop.products (id, name, price, stock, attributes)
SELECT g, 'Product ' || g, round((g * 3.17)::numeric % 200 + 0.99, 2), 100 + g % 50,
       json_build_object('color', (ARRAY['red', 'green', 'blue'])[1 + g % 3], 'weight_g', g * 10)
FROM generate_series(1, 100) g;

INSERT INTO shop.orders (id, customer_id, product_id, quantity, total, status, ordered_at, note)
SELECT g, 1 + g % 500, 1 + g % 100, 1 + g % 5, (1 + g % 5) * 9.99, 'placed',
       TIMESTAMPTZ '2024-03-01 00:00:00+00' + g * INTERVAL '11 minutes',
       CASE WHEN g % 7 = 0 THEN 'gift wrap' END
FROM generate_series(1, 2000) g;
