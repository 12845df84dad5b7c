//! The orders the desk keeps.

use serde::{Deserialize, Serialize};

/// One order in the desk's in-memory store; `get_order` answers with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The order's id, e.g. `A-1001`.
    pub order_id: String,
    /// A free-text status, e.g. `confirmed`.
    pub status: String,
    /// The delivery slot the tools change and restore, as text.
    pub delivery_date: String,
    /// Where the buyer's notification goes.
    pub buyer_email: String,
    /// What was ordered.
    pub items: Vec<Item>,
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Stock keeping unit.
    pub sku: String,
    /// Human-readable name.
    pub name: String,
    /// How many.
    pub quantity: u32,
}

impl Order {
    /// An order with no items.
    pub fn new(order_id: &str, status: &str, delivery_date: &str, buyer_email: &str) -> Order {
        Order {
            order_id: order_id.to_owned(),
            status: status.to_owned(),
            delivery_date: delivery_date.to_owned(),
            buyer_email: buyer_email.to_owned(),
            items: Vec::new(),
        }
    }

    /// Adds an item line.
    pub fn with_item(mut self, sku: &str, name: &str, quantity: u32) -> Order {
        self.items.push(Item {
            sku: sku.to_owned(),
            name: name.to_owned(),
            quantity,
        });
        self
    }
}

/// The orders a desk starts with unless told otherwise: `A-1001` (the
/// demo's order), `A-1002` and `A-1003`.
pub fn seed_orders() -> Vec<Order> {
    vec![
        Order::new(
            "A-1001",
            "confirmed",
            "2026-01-05T14:00:00Z",
            "buyer-a1001@example.com",
        )
        .with_item("SKU-CHAIR-01", "Oak chair", 2)
        .with_item("SKU-TABLE-01", "Oak table", 1),
        Order::new(
            "A-1002",
            "confirmed",
            "2026-01-07T09:00:00Z",
            "buyer-a1002@example.com",
        )
        .with_item("SKU-LAMP-02", "Desk lamp", 1),
        Order::new(
            "A-1003",
            "shipped",
            "2026-01-03T10:00:00Z",
            "buyer-a1003@example.com",
        )
        .with_item("SKU-RUG-03", "Wool rug", 1),
    ]
}
