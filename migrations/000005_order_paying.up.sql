-- An order being paid says so itself: paying, between pending_payment and
-- paid. The expiry job and a second payment then ask the order's own row
-- instead of the payments table.
ALTER TABLE orders DROP CONSTRAINT orders_status_valid;
ALTER TABLE orders ADD CONSTRAINT orders_status_valid
    CHECK (status IN ('pending_payment', 'paying', 'paid', 'cancelled', 'expired'));

-- Orders whose payment is in flight now are being paid.
UPDATE orders o SET status = 'paying', version = o.version + 1
 WHERE o.status = 'pending_payment'
   AND EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id AND p.status = 'processing');
